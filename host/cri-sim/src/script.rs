//! Scripted behaviour: how a test tells the simulator what a container, a pod or an
//! image should do, beyond what its command implies.
//!
//! A script is a list of `key[=value]` items separated by spaces, commas or semicolons,
//! e.g. `exit-after=2s exit-code=1` or `hang-stop`. It comes from, first match wins per
//! key:
//! 1. the container's annotation `sim.wasmlet.io/script`;
//! 2. the pod's (sandbox's) annotation `sim.wasmlet.io/script.<container-name>` — the
//!    way a pod manifest reaches a container, since the kubelet copies pod annotations
//!    only onto the sandbox;
//! 3. the script registered for the container's image ([`crate::Simulator::add_image`],
//!    or `wasmlet-cri-sim --image NAME=SCRIPT`).
//!
//! | key | meaning |
//! |---|---|
//! | `exit-after=DUR` | the process exits on its own after DUR (overrides the command) |
//! | `exit-code=N` | ... with code N (default 0; reason `Completed` for 0, else `Error`) |
//! | `oom-after=DUR` | the OOM killer ends it after DUR: code 137, reason `OOMKilled` |
//! | `run-forever` | the process never exits on its own, whatever its command says |
//! | `term-exit=N` | SIGTERM makes it exit with N at once |
//! | `ignore-term` | SIGTERM is ignored: StopContainer waits the full grace period |
//! | `hang-stop` | StopContainer never answers (a wedged runtime) |
//! | `fail-create=MSG` | CreateContainer fails with MSG |
//! | `fail-start=MSG` | StartContainer fails with MSG; the container ends `StartError`, 128 |
//! | `exec-exit=N` | every ExecSync answers exit code N |
//! | `exec-fail-after=DUR` | ExecSync answers 1 once the container has run DUR |
//! | `exec-latency=DUR` | every ExecSync takes DUR |
//!
//! Pods take one more annotation: `sim.wasmlet.io/fail-run-sandbox: "N"` makes the first
//! N RunPodSandbox calls for that pod UID fail like a CNI error.
//!
//! Durations are `500ms`, `2s`, `1.5s`, `3m`, `1h`. A value with spaces goes in double
//! quotes: `fail-start="exec format error"`.

use std::collections::BTreeMap;
use std::time::Duration;

/// Container annotation holding a script.
pub const SCRIPT_ANNOTATION: &str = "sim.wasmlet.io/script";
/// Sandbox annotation prefix: `sim.wasmlet.io/script.<container>` scripts that container.
pub const POD_SCRIPT_PREFIX: &str = "sim.wasmlet.io/script.";
/// Sandbox annotation: fail the first N RunPodSandbox calls for the pod.
pub const FAIL_RUN_SANDBOX_ANNOTATION: &str = "sim.wasmlet.io/fail-run-sandbox";

/// A parsed script. Unset fields defer to the next source, then to the command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    /// `exit-after`
    pub exit_after: Option<Duration>,
    /// `exit-code`
    pub exit_code: Option<i32>,
    /// `oom-after`
    pub oom_after: Option<Duration>,
    /// `run-forever`
    pub run_forever: bool,
    /// `term-exit` (`Some(Some(n))`) or `ignore-term` (`Some(None)`)
    pub on_term: Option<Option<i32>>,
    /// `hang-stop`
    pub hang_stop: bool,
    /// `fail-create`
    pub fail_create: Option<String>,
    /// `fail-start`
    pub fail_start: Option<String>,
    /// `exec-exit`
    pub exec_exit: Option<i32>,
    /// `exec-fail-after`
    pub exec_fail_after: Option<Duration>,
    /// `exec-latency`
    pub exec_latency: Option<Duration>,
}

/// A script that does not parse; names the item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid simulator script item {item:?}: {why}")]
pub struct ScriptError {
    /// The offending `key=value`.
    pub item: String,
    /// What is wrong with it.
    pub why: String,
}

impl Script {
    /// Parses `key[=value]` items.
    pub fn parse(text: &str) -> Result<Self, ScriptError> {
        let mut s = Self::default();
        for item in items(text) {
            let item = item.as_str();
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k, Some(v.trim_matches('"'))),
                None => (item, None),
            };
            let err = |why: &str| ScriptError {
                item: item.to_owned(),
                why: why.to_owned(),
            };
            let need = || value.ok_or_else(|| err("needs a value"));
            let dur = || {
                need().and_then(|v| {
                    parse_duration(v).ok_or_else(|| err("not a duration (e.g. 2s, 500ms)"))
                })
            };
            let int = || need().and_then(|v| v.parse::<i32>().map_err(|_| err("not an integer")));
            match key {
                "exit-after" => s.exit_after = Some(dur()?),
                "exit-code" => s.exit_code = Some(int()?),
                "oom-after" => s.oom_after = Some(dur()?),
                "run-forever" => s.run_forever = true,
                "term-exit" => s.on_term = Some(Some(int()?)),
                "ignore-term" => s.on_term = Some(None),
                "hang-stop" => s.hang_stop = true,
                "fail-create" => s.fail_create = Some(need()?.to_owned()),
                "fail-start" => s.fail_start = Some(need()?.to_owned()),
                "exec-exit" => s.exec_exit = Some(int()?),
                "exec-fail-after" => s.exec_fail_after = Some(dur()?),
                "exec-latency" => s.exec_latency = Some(dur()?),
                _ => return Err(err("unknown key")),
            }
        }
        Ok(s)
    }

    /// Fills every unset field from `other` (a lower-priority source).
    pub fn or(mut self, other: &Script) -> Self {
        self.exit_after = self.exit_after.or(other.exit_after);
        self.exit_code = self.exit_code.or(other.exit_code);
        self.oom_after = self.oom_after.or(other.oom_after);
        self.run_forever |= other.run_forever;
        self.on_term = self.on_term.or(other.on_term);
        self.hang_stop |= other.hang_stop;
        self.fail_create = self.fail_create.or_else(|| other.fail_create.clone());
        self.fail_start = self.fail_start.or_else(|| other.fail_start.clone());
        self.exec_exit = self.exec_exit.or(other.exec_exit);
        self.exec_fail_after = self.exec_fail_after.or(other.exec_fail_after);
        self.exec_latency = self.exec_latency.or(other.exec_latency);
        self
    }

    /// The script of a container: its own annotation, then its pod's, then its image's.
    pub fn for_container(
        container_annotations: &BTreeMap<String, String>,
        pod_annotations: &BTreeMap<String, String>,
        container_name: &str,
        image_script: Option<&Script>,
    ) -> Result<Self, ScriptError> {
        let own = match container_annotations.get(SCRIPT_ANNOTATION) {
            Some(text) => Self::parse(text)?,
            None => Self::default(),
        };
        let pod = match pod_annotations.get(&format!("{POD_SCRIPT_PREFIX}{container_name}")) {
            Some(text) => Self::parse(text)?,
            None => Self::default(),
        };
        let image = image_script.cloned().unwrap_or_default();
        Ok(own.or(&pod).or(&image))
    }
}

/// Splits a script into `key[=value]` items at spaces, commas, semicolons and line
/// breaks outside double quotes (`fail-start="exec format error"` is one item).
fn items(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ' ' | ',' | ';' | '\n' | '\t' if !quoted => {
                if !cur.is_empty() {
                    items.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        items.push(cur);
    }
    items
}

/// Parses `500ms`, `2s`, `1.5s`, `3m`, `1h` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_items() {
        let s =
            Script::parse("exit-after=2s, exit-code=1; hang-stop term-exit=0 exec-latency=250ms")
                .expect("valid");
        assert_eq!(s.exit_after, Some(Duration::from_secs(2)));
        assert_eq!(s.exit_code, Some(1));
        assert!(s.hang_stop);
        assert_eq!(s.on_term, Some(Some(0)));
        assert_eq!(s.exec_latency, Some(Duration::from_millis(250)));
    }

    #[test]
    fn quoted_values_keep_their_spaces() {
        let s = Script::parse("fail-start=\"exec format error\", hang-stop").expect("valid");
        assert_eq!(s.fail_start.as_deref(), Some("exec format error"));
        assert!(s.hang_stop);
    }

    #[test]
    fn errors_name_the_item() {
        let e = Script::parse("exit-after=soon").expect_err("bad duration");
        assert_eq!(e.item, "exit-after=soon");
        assert!(
            Script::parse("explode")
                .expect_err("unknown")
                .to_string()
                .contains("explode")
        );
        assert!(Script::parse("exit-code").is_err());
    }

    #[test]
    fn container_beats_pod_beats_image() {
        let c = BTreeMap::from([(SCRIPT_ANNOTATION.to_string(), "exit-code=3".to_string())]);
        let p = BTreeMap::from([(
            format!("{POD_SCRIPT_PREFIX}app"),
            "exit-code=4 exit-after=1s".to_string(),
        )]);
        let image = Script::parse("exit-after=9s hang-stop").expect("valid");
        let s = Script::for_container(&c, &p, "app", Some(&image)).expect("valid");
        assert_eq!(s.exit_code, Some(3));
        assert_eq!(s.exit_after, Some(Duration::from_secs(1)));
        assert!(s.hang_stop);
        let other = Script::for_container(&BTreeMap::new(), &p, "sidecar", None).expect("valid");
        assert_eq!(other, Script::default());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("3m"), Some(Duration::from_secs(180)));
        assert_eq!(parse_duration("10"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration("2d"), None);
    }
}
