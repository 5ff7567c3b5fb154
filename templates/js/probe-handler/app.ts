// A custom probe for wasmlet: a command run in the container must print what is expected.
// Arguments (the custom action's key-values): `command`, its words separated by commas
// (`redis-cli,ping`; run without a shell), and `expect`, a substring of its output
// (default: exit 0 is enough). Needs the `exec` grant.
import { ExecError, customArgs, error, execSync, failure, handler, success } from 'wasmlet-plugin/probe';

export const probe = handler((target) => {
  const args = customArgs(target);
  if (!args?.command) return error('command-output handles custom probes with a `command` argument');
  const command = args.command.split(',').filter(Boolean);
  let out;
  try {
    out = execSync(command, target.timeoutMs);
  } catch (e) {
    if (e instanceof ExecError) return failure(`${command[0]}: ${e.message}`);
    throw e;
  }
  const stdout = out.stdout.trim();
  if (out.exitCode !== 0) return failure(`${command[0]} exited with ${out.exitCode}: ${stdout}`);
  const expect = args.expect ?? '';
  if (!stdout.includes(expect)) return failure(`${command[0]} printed '${stdout}', not '${expect}'`);
  return success(stdout);
});
