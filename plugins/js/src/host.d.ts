// Types of host.js; the WIT's own come from `jco guest-types` (build.mjs generates them).
type Level = import('wasmlet:plugin/host@0.1.0').Level;

export function config(key: string): string | undefined;
export function config(key: string, fallback: string): string;
export function configAll(): Record<string, string>;
export function log(level: Level, message: string, fields?: Record<string, unknown>): void;
export function debug(message: string, fields?: Record<string, unknown>): void;
export function info(message: string, fields?: Record<string, unknown>): void;
export function warn(message: string, fields?: Record<string, unknown>): void;
export function error(message: string, fields?: Record<string, unknown>): void;
export function nowNs(): bigint;
