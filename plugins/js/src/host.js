// What the host offers every plugin: its configuration, the agent's log and the clock.
import * as host from 'wasmlet:plugin/host@0.1.0';

/** The plugin's configuration value for `key`, or `fallback` when it has none. */
export function config(key, fallback = undefined) {
  const value = host.config(key);
  return value === undefined ? fallback : value;
}

/** Every configuration value the plugin was given, as an object. */
export function configAll() {
  return Object.fromEntries(host.configAll());
}

/** A structured line in the agent's log, tagged with the plugin's name. */
export function log(level, message, fields = {}) {
  host.log(level, message, Object.entries(fields).sort().map(([k, v]) => [k, String(v)]));
}

export const debug = (message, fields) => log('debug', message, fields);
export const info = (message, fields) => log('info', message, fields);
export const warn = (message, fields) => log('warn', message, fields);
export const error = (message, fields) => log('error', message, fields);

/** Wall-clock time in nanoseconds since the Unix epoch (a BigInt). */
export const nowNs = () => host.now();
