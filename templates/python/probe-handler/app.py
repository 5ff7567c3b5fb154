"""A custom probe for wasmlet: a command run in the container must print what is
expected. Arguments (the custom action's key-values): `command`, its words separated by
commas (`redis-cli,ping`; run without a shell), and `expect`, a substring of its output
(default: exit 0 is enough). Needs the `exec` grant."""

from wasmlet_plugin.probe import ExecError, Handler, custom_args, error, exec_sync, failure, success


class Probe(Handler):
    def probe(self, target):
        args = custom_args(target)
        if args is None or not args.get("command"):
            return error("command-output handles custom probes with a `command` argument")
        command = [w for w in args["command"].split(",") if w]
        try:
            out = exec_sync(command, target.timeout_ms)
        except ExecError as e:
            return failure(f"{command[0]}: {e}")
        stdout = out.stdout.decode(errors="replace").strip()
        if out.exit_code != 0:
            return failure(f"{command[0]} exited with {out.exit_code}: {stdout}")
        expect = args.get("expect", "")
        if expect not in stdout:
            return failure(f"{command[0]} printed {stdout!r}, not {expect!r}")
        return success(stdout)
