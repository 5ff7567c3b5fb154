//! `probe-exec`: the kubelet's exec probe. The command runs in the container through the
//! runtime (CRI ExecSync); exit code 0 is success, anything else failure, with the
//! command's output as the message, as the kubelet reports it. A command that outlives
//! the probe's timeout fails with `command timed out`. Needs the `exec` grant.

use wasmlet_plugin_sdk::probe::*;

struct Exec;

impl ProbeHandler for Exec {
    fn check(target: Target) -> Outcome {
        let Action::Exec(command) = target.action else {
            return Outcome::Error("probe-exec handles exec probes only".into());
        };
        if command.is_empty() {
            return Outcome::Error("exec probe without a command".into());
        }
        match exec_sync(&command, target.timeout_ms) {
            Ok(out) => {
                let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
                output.push_str(&String::from_utf8_lossy(&out.stderr));
                if out.exit_code == 0 {
                    Outcome::Success(output)
                } else {
                    Outcome::Failure(output)
                }
            }
            Err(e) if e.contains("timed out") || e.contains("deadline") => {
                Outcome::Failure(format!("command {command:?} timed out"))
            }
            Err(e) => Outcome::Error(e),
        }
    }
}

wasmlet_plugin_sdk::export_probe_handler!(Exec);
