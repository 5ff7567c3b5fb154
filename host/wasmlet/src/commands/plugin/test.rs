//! `wasmlet plugin test POLICY.wasm CASES.yaml…`: an admission policy against files of
//! cases, each a pod (and optionally a node, the pods already on it, configuration) and
//! the verdict expected. Every case is reported; a failed one shows what differs, the
//! expected lines marked `-` and what the policy decided `+`. Exit 0 when every case
//! passed, 1 when one failed, 2 when a file or the policy could not be read.
//!
//! ```yaml
//! node:                     # optional: for every case (else a 4-CPU, 16Gi node)
//!   metadata: {name: node-a}
//!   status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}
//! config: {exempt-namespace: kube-system}     # optional: for every case
//! activePods: []            # optional: pods already on the node
//! cases:
//! - name: a container without a memory limit is refused
//!   pod:                    # or podFile: pods/web.yaml (beside this file)
//!     metadata: {name: web, namespace: shop}
//!     spec: {containers: [{name: app, image: nginx}]}
//!   expect:
//!     verdict: Reject       # Admit, Reject or Error (the policy failed)
//!     reason: MissingMemoryLimit
//!     message: container app has no memory limit   # or messageContains: …
//! ```
//!
//! A case may also give `node`, `activePods`, `config` (its keys over the file's) and
//! `source` (`api`, `file`, `http`) of its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Deserialize;
use serde_json::Value;
use wasmlet_plugin_host::{Admission, AdmissionPlugin, Node, PluginEngine, Verdict, convert};

use super::admit::{LimitArgs, node_of, plugin_name, pod};

/// Arguments of `wasmlet plugin test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// The admission policy.
    pub policy: PathBuf,
    /// Files of cases (YAML or JSON).
    #[arg(required = true)]
    pub cases: Vec<PathBuf>,
    /// Run only the cases whose name contains this.
    #[arg(long, value_name = "TEXT")]
    pub only: Option<String>,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// A file of cases.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CaseFile {
    node: Option<Value>,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default)]
    active_pods: Vec<Value>,
    cases: Vec<Case>,
}

/// One case: the pod, what it is decided beside, and the verdict expected.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Case {
    name: String,
    pod: Option<Value>,
    pod_file: Option<PathBuf>,
    node: Option<Value>,
    active_pods: Option<Vec<Value>>,
    #[serde(default)]
    config: BTreeMap<String, String>,
    source: Option<String>,
    expect: Expect,
}

/// The verdict a case expects.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Expect {
    verdict: Expected,
    reason: Option<String>,
    message: Option<String>,
    message_contains: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
enum Expected {
    Admit,
    Reject,
    Error,
}

/// What the policy decided on a case's pod.
#[derive(Debug)]
struct Outcome {
    verdict: Expected,
    reason: Option<String>,
    message: Option<String>,
}

/// The node a case file without one decides on: room for every pod a case is likely to
/// hold, no labels, no taints.
fn default_node() -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node"},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}
    })
}

/// `wasmlet plugin test`.
pub async fn run(cache: Option<&Path>, args: TestArgs) -> Result<ExitCode> {
    let files = match read_all(&args.cases) {
        Ok(files) => files,
        Err(e) => return Ok(unreadable(e)),
    };
    let mut policies = Policies::new(cache, &args)?;
    let (mut passed, mut failed) = (0, 0);
    for (path, file) in &files {
        for (i, case) in file.cases.iter().enumerate() {
            if args.only.as_ref().is_some_and(|o| !case.name.contains(o)) {
                continue;
            }
            let at = format!("{} case {} ({:?})", path.display(), i + 1, case.name);
            let outcome = match decide(&mut policies, path, file, case, &at).await {
                Ok(outcome) => outcome,
                Err(e) => return Ok(unreadable(e)),
            };
            match differences(&case.expect, &outcome) {
                None => {
                    passed += 1;
                    println!("ok    {}", case.name);
                }
                Some(lines) => {
                    failed += 1;
                    println!("FAIL  {}   ({})", case.name, path.display());
                    lines.iter().for_each(|l| println!("        {l}"));
                }
            }
        }
    }
    println!("\n{passed} passed, {failed} failed");
    Ok(if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A file or case that cannot be read: said, exit 2.
fn unreadable(e: anyhow::Error) -> ExitCode {
    eprintln!("wasmlet plugin test: {e:#}");
    ExitCode::from(2)
}

/// Every file of cases, read and checked.
fn read_all(paths: &[PathBuf]) -> Result<Vec<(PathBuf, CaseFile)>> {
    paths
        .iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let file: CaseFile =
                serde_yaml_ng::from_str(&text).with_context(|| format!("{}", p.display()))?;
            if file.cases.is_empty() {
                bail!("{}: no cases in it", p.display());
            }
            Ok((p.clone(), file))
        })
        .collect()
}

/// The policy, loaded once per configuration the cases give it.
struct Policies<'a> {
    engine: PluginEngine,
    args: &'a TestArgs,
    loaded: BTreeMap<BTreeMap<String, String>, Arc<AdmissionPlugin>>,
    /// Where components compiled for one configuration wait for the next, when the
    /// command was given no cache of its own.
    _scratch: Option<Scratch>,
}

impl<'a> Policies<'a> {
    fn new(cache: Option<&Path>, args: &'a TestArgs) -> Result<Self> {
        let (engine, scratch) = match cache {
            Some(dir) => (super::engine(Some(dir))?, None),
            None => {
                let scratch = Scratch::new()?;
                (PluginEngine::with_cache(&scratch.0)?, Some(scratch))
            }
        };
        Ok(Policies {
            engine,
            args,
            loaded: Default::default(),
            _scratch: scratch,
        })
    }

    /// The policy with `config`, loaded on first use.
    fn with(&mut self, config: BTreeMap<String, String>) -> Result<Arc<AdmissionPlugin>> {
        if let Some(p) = self.loaded.get(&config) {
            return Ok(p.clone());
        }
        let path = &self.args.policy;
        let limits = self.args.limits.limits();
        let plugin =
            self.engine
                .load_admission(&plugin_name(path), path, config.clone(), limits)?;
        let plugin = Arc::new(plugin);
        self.loaded.insert(config, plugin.clone());
        Ok(plugin)
    }
}

/// A directory of this process's own, removed when it ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("wasmlet-plugin-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The policy's decision on `case`; errors name the case.
async fn decide(
    policies: &mut Policies<'_>,
    path: &Path,
    file: &CaseFile,
    case: &Case,
    at: &str,
) -> Result<Outcome> {
    let source = case.source.as_deref();
    let pod_value = case_pod(path, case).with_context(|| at.to_owned())?;
    let (candidate, json) = pod(pod_value, source, || format!("{at}: pod"))?;
    let node = case_node(file, case, at)?;
    let active = case.active_pods.as_ref().unwrap_or(&file.active_pods);
    let active = active
        .iter()
        .enumerate()
        .map(|(i, v)| pod(v.clone(), None, || format!("{at}: activePods[{i}]")).map(|(p, _)| p))
        .collect::<Result<Vec<_>>>()?;
    let mut config = file.config.clone();
    config.extend(case.config.clone());
    let policy = policies.with(config)?;
    let admission = Admission::new(candidate, node, convert::load(&active), move || {
        json.to_string()
    });
    Ok(match policy.admit(&admission).await {
        Ok(Verdict::Admit) => Outcome {
            verdict: Expected::Admit,
            reason: None,
            message: None,
        },
        Ok(Verdict::Reject(r)) => Outcome {
            verdict: Expected::Reject,
            reason: Some(r.reason),
            message: Some(r.message),
        },
        Err(e) => Outcome {
            verdict: Expected::Error,
            reason: None,
            message: Some(e.to_string()),
        },
    })
}

/// The case's pod: written in the case, or in a file beside the cases.
fn case_pod(path: &Path, case: &Case) -> Result<Value> {
    match (&case.pod, &case.pod_file) {
        (Some(pod), None) => Ok(pod.clone()),
        (None, Some(file)) => {
            let file = path.parent().unwrap_or(Path::new(".")).join(file);
            let mut objects = super::admit::objects(&file)?;
            if objects.len() != 1 {
                bail!(
                    "podFile {}: {} objects, not one pod",
                    file.display(),
                    objects.len()
                );
            }
            Ok(objects.remove(0))
        }
        (Some(_), Some(_)) => bail!("give pod or podFile, not both"),
        (None, None) => bail!("no pod: give pod or podFile"),
    }
}

/// The case's node, else the file's, else [`default_node`].
fn case_node(file: &CaseFile, case: &Case, at: &str) -> Result<Arc<Node>> {
    let value = case
        .node
        .clone()
        .or_else(|| file.node.clone())
        .unwrap_or_else(default_node);
    node_of(value, || format!("{at}: node"))
}

/// What differs between the expected verdict and the outcome, as diff lines; `None`
/// when the case passed.
fn differences(expect: &Expect, got: &Outcome) -> Option<Vec<String>> {
    let verdict_line = |v: Expected| format!("verdict: {v:?}");
    let mut lines = Vec::new();
    let mut failed = expect.verdict != got.verdict;
    if failed {
        lines.push(format!("- {}", verdict_line(expect.verdict)));
        lines.push(format!("+ {}", verdict_line(got.verdict)));
    } else {
        lines.push(format!("  {}", verdict_line(got.verdict)));
    }
    let fields = [
        ("reason", &expect.reason, &got.reason, false),
        ("message", &expect.message, &got.message, false),
        ("message", &expect.message_contains, &got.message, true),
    ];
    for (name, want, have, contains) in fields {
        let have_text = have.as_deref().unwrap_or("");
        match want {
            Some(w) if matches(w, have_text, contains) => {
                lines.push(format!("  {name}: {have_text}"));
            }
            Some(w) => {
                failed = true;
                let label = if contains { "message contains" } else { name };
                lines.push(format!("- {label}: {w}"));
                lines.push(format!("+ {name}: {have_text}"));
            }
            None if !contains && have.is_some() && expect.verdict != got.verdict => {
                lines.push(format!("+ {name}: {have_text}"));
            }
            None => {}
        }
    }
    failed.then_some(lines)
}

fn matches(want: &str, have: &str, contains: bool) -> bool {
    if contains {
        have.contains(want)
    } else {
        have == want
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(verdict: Expected, reason: Option<&str>, contains: Option<&str>) -> Expect {
        Expect {
            verdict,
            reason: reason.map(Into::into),
            message: None,
            message_contains: contains.map(Into::into),
        }
    }

    fn rejected(reason: &str, message: &str) -> Outcome {
        Outcome {
            verdict: Expected::Reject,
            reason: Some(reason.into()),
            message: Some(message.into()),
        }
    }

    #[test]
    fn a_matching_outcome_passes() {
        let e = expect(Expected::Reject, Some("NoTeam"), Some("team="));
        assert_eq!(differences(&e, &rejected("NoTeam", "needs team=x")), None);
    }

    #[test]
    fn a_wrong_verdict_shows_what_was_decided() {
        let e = expect(Expected::Admit, None, None);
        let lines = differences(&e, &rejected("NoTeam", "needs team=x")).expect("a failed case");
        assert_eq!(
            lines,
            [
                "- verdict: Admit",
                "+ verdict: Reject",
                "+ reason: NoTeam",
                "+ message: needs team=x"
            ]
        );
    }

    #[test]
    fn a_wrong_reason_is_the_only_line_marked() {
        let e = expect(Expected::Reject, Some("NoTeam"), Some("team="));
        let lines =
            differences(&e, &rejected("Privileged", "needs team=x")).expect("a failed case");
        assert_eq!(
            lines,
            [
                "  verdict: Reject",
                "- reason: NoTeam",
                "+ reason: Privileged",
                "  message: needs team=x"
            ]
        );
    }

    #[test]
    fn a_case_file_with_a_misspelt_field_is_refused_by_name() {
        let text = "cases:\n- name: x\n  pod: {}\n  expect: {verdict: Admit, reasn: X}\n";
        let e = serde_yaml_ng::from_str::<CaseFile>(text).expect_err("refused");
        assert!(e.to_string().contains("unknown field `reasn`"), "{e}");
    }
}
