//! `wasmlet plugin admit`: pods decided offline by a chain of admission policies, as the
//! agent's admission chain decides them, and the pieces `plugin test` shares with it
//! (reading nodes and pods, the policies' limits).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use k8s_openapi::api::core::v1 as k8s;
use wasmlet_plugin_host::{
    Admission, AdmissionChain, FailurePolicy, InstanceMode, Limits, Node, PluginEngine, Pod,
    Verdict, chain::PLUGIN_ERROR_REASON, convert,
};

use super::key_value;

/// Arguments of `wasmlet plugin admit`.
#[derive(Debug, Args)]
pub struct AdmitArgs {
    /// The policies, in chain order.
    #[arg(required = true)]
    pub policies: Vec<PathBuf>,
    /// The pod (YAML or JSON). Several pods (a multi-document file or a PodList) are
    /// decided in order, each admitted pod joining the node's active pods, as the
    /// kubelet admits a batch.
    #[arg(long)]
    pub pod: PathBuf,
    /// The node (YAML or JSON): labels, taints, `status.allocatable` (or capacity).
    #[arg(long)]
    pub node: PathBuf,
    /// A directory of manifests of the pods already on the node (`.yaml`, `.yml`,
    /// `.json`); their requests, count and host ports make the node's usage.
    #[arg(long)]
    pub active_pods: Option<PathBuf>,
    /// A configuration value for every policy (repeatable).
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
    pub config: Vec<(String, String)>,
    /// The source the pods come from: `api`, or a static-pod source (`file`, `http`).
    /// Default: each pod's own `kubernetes.io/config.source` annotation, as the agent
    /// decides, else `api`.
    #[arg(long)]
    pub source: Option<String>,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// The limits each policy runs with, as the node's configuration gives them.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Deadline of one decision, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub timeout_ms: u64,
    /// The policy's guest memory (`memoryLimit` in the node's configuration), e.g. `16Mi`.
    #[arg(long, value_name = "QUANTITY", default_value = "64Mi", value_parser = memory_limit)]
    pub memory_limit: usize,
    /// Whether decisions share instances (`instances`: `Reused`, the default, or `PerCall`).
    #[arg(long, value_enum, default_value_t = Instances::Reused)]
    pub instances: Instances,
}

impl LimitArgs {
    /// The limits as the plugin host takes them.
    pub fn limits(&self) -> Limits {
        Limits {
            deadline: std::time::Duration::from_millis(self.timeout_ms),
            memory_bytes: self.memory_limit,
            instances: match self.instances {
                Instances::Reused => InstanceMode::Reused,
                Instances::PerCall => InstanceMode::PerCall,
            },
        }
    }
}

/// `--instances` of `plugin admit` and `plugin test`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Instances {
    /// Decisions share kept instances.
    #[value(name = "Reused", alias = "reused")]
    Reused,
    /// Every decision has a fresh instance.
    #[value(name = "PerCall", alias = "per-call")]
    PerCall,
}

/// A memory limit as the configuration writes it, within the largest a plugin may have.
fn memory_limit(s: &str) -> Result<usize, String> {
    let bytes = convert::parse_quantity(s, 0).map_err(|e| e.to_string())?;
    if bytes > wasmlet_plugin_host::MAX_MEMORY_BYTES as u64 {
        return Err(format!("{s} is more than the largest allowed, 256Mi"));
    }
    Ok(usize::try_from(bytes).unwrap_or(usize::MAX))
}

/// A plugin run offline is named after its file: `resource_fit.wasm` → `resource_fit`.
pub(super) fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Every object in a manifest file, with the file named in errors.
pub(super) fn objects(path: &Path) -> Result<Vec<serde_json::Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    convert::documents(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The pods of a manifest file: (the pod, its JSON), errors naming file and field.
fn pods(path: &Path, source: Option<&str>) -> Result<Vec<(Pod, Arc<String>)>> {
    objects(path)?
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            pod(value, source, || {
                format!("{} (object {})", path.display(), i + 1)
            })
        })
        .collect()
}

/// A pod manifest as the plugin host sees it, and its JSON; `at` names it in errors.
/// Its source is `source`, else its `kubernetes.io/config.source` annotation, else `api`.
pub(super) fn pod(
    value: serde_json::Value,
    source: Option<&str>,
    at: impl Fn() -> String,
) -> Result<(Pod, Arc<String>)> {
    match value.get("kind").and_then(|k| k.as_str()) {
        None | Some("Pod") => {}
        Some(kind) => bail!("{}: a {kind}, not a Pod", at()),
    }
    let json = Arc::new(value.to_string());
    let p: k8s::Pod = serde_json::from_value(value).with_context(&at)?;
    let annotated = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/config.source"))
        .map(String::as_str);
    let source = source.or(annotated).unwrap_or("api");
    let pod = convert::pod(&p, source).with_context(at)?;
    Ok((pod, json))
}

/// The one Node of a manifest file.
fn node(path: &Path) -> Result<Arc<Node>> {
    let objects = objects(path)?;
    let [value] = objects.as_slice() else {
        bail!(
            "{}: expected one Node, found {} objects",
            path.display(),
            objects.len()
        );
    };
    node_of(value.clone(), || path.display().to_string())
}

/// A Node manifest as the plugin host sees it; `at` names it in errors.
pub(super) fn node_of(value: serde_json::Value, at: impl Fn() -> String) -> Result<Arc<Node>> {
    let node: k8s::Node = serde_json::from_value(value).with_context(&at)?;
    Ok(Arc::new(convert::node(&node).with_context(at)?))
}

/// The pods of every manifest in `dir`; a broken file is reported by name and skipped.
fn active_pods(dir: &Path) -> Result<Vec<Pod>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        match pods(&file, None) {
            Ok(list) => out.extend(list.into_iter().map(|(p, _)| p)),
            Err(e) => eprintln!("wasmlet: skipping {e:#}"),
        }
    }
    Ok(out)
}

/// `wasmlet plugin admit`: each pod decided in turn, an admitted one joining the active
/// pods the next is decided beside.
pub async fn admit(engine: PluginEngine, args: AdmitArgs) -> Result<ExitCode> {
    let node = node(&args.node)?;
    let mut active = match &args.active_pods {
        Some(dir) => active_pods(dir)?,
        None => Vec::new(),
    };
    let candidates = pods(&args.pod, args.source.as_deref())?;
    if candidates.is_empty() {
        bail!("{}: no pod in it", args.pod.display());
    }

    let chain = AdmissionChain::new(engine);
    let config: BTreeMap<String, String> = args.config.into_iter().collect();
    let limits = args.limits.limits();
    for path in &args.policies {
        chain.push(
            &plugin_name(path),
            path,
            config.clone(),
            limits.clone(),
            FailurePolicy::Fail,
        )?;
    }

    let (mut rejected, mut failed) = (false, false);
    for (pod, json) in candidates {
        let usage = convert::load(&active);
        let who = format!("{}/{}", pod.namespace, pod.name);
        let admission = Admission::new(pod, node.clone(), usage, move || json.to_string());
        let (verdict, by) = chain.admit(&admission).await;
        match verdict {
            Verdict::Admit => {
                println!("{who}: admitted");
                active.push((**admission.pod()).clone());
            }
            // The chain rejects for a policy that failed (its failure policy is Fail):
            // here that is an error of the policy, not its verdict.
            Verdict::Reject(r) if r.reason == PLUGIN_ERROR_REASON => {
                failed = true;
                println!("{who}: error: {}", r.message);
            }
            Verdict::Reject(r) => {
                rejected = true;
                let by = by.unwrap_or_default();
                println!("{who}: rejected by {by}: {}: {}", r.reason, r.message);
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else if rejected {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}
