// Writing a probe handler (the `probe-handler` world):
//
//   import { handler, success } from 'wasmlet-plugin/probe';
//   export const probe = handler((target) => success(`${target.containerName} is fine`));
//
// An exception the handler throws is the outcome `error` naming it (the kubelet counts an
// errored probe as a failure), not a trap.
import { execSync as hostExecSync } from 'wasmlet:plugin/exec@0.1.0';
import { describe } from './errors.js';

/** The container passed (the message is kept). */
export const success = (message = '') => ({ tag: 'success', val: message });
/** The container failed the check. */
export const failure = (why) => ({ tag: 'failure', val: why });
/** The check could not be made. */
export const error = (why) => ({ tag: 'error', val: why });

/** A custom probe's arguments as an object, or `undefined` for the kubelet's kinds. */
export function customArgs(target) {
  return target.action.tag === 'custom' ? Object.fromEntries(target.action.val) : undefined;
}

/** The runtime could not run the command (no grant, the container is gone, time ran out). */
export class ExecError extends Error {}

/**
 * Runs `command` (argv, no shell) in the probed container; needs the `exec` grant.
 * Returns `{ exitCode, stdout, stderr }` with the output as strings.
 */
export function execSync(command, timeoutMs) {
  let out;
  try {
    out = hostExecSync(command, timeoutMs);
  } catch (e) {
    throw new ExecError(String(e?.payload ?? e));
  }
  const text = new TextDecoder();
  return { exitCode: out.exitCode, stdout: text.decode(out.stdout), stderr: text.decode(out.stderr) };
}

/** The `probe` export of a handler: `check(target)` returns an outcome. */
export function handler(check) {
  return {
    check(target) {
      try {
        return check(target);
      } catch (e) {
        return error(describe(e));
      }
    },
  };
}
