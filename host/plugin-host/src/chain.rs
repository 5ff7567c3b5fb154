//! [`AdmissionChain`]: the admission plugins of a node, in their configured order, each
//! replaceable while pods are being admitted.
//!
//! Every link holds its plugin behind an `ArcSwap`. A call takes the plugin current at
//! that moment and finishes on it; [`AdmissionChain::replace`] compiles the new version
//! off the hot path and swaps it in with one atomic store, so calls in flight finish on
//! the old version, new calls use the new one, and no call fails because of the swap. A
//! version that does not compile or does not implement the world is refused with the
//! error and the old one keeps serving.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::{
    AdmissionPlugin, Limits, Node, NodeUsage, PluginEngine, PluginError, Pod, Rejection, Verdict,
};

/// What a chain does with a plugin that fails (traps, times out) instead of deciding,
/// as with Kubernetes admission webhooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The pod is rejected, reason `AdmissionPluginError`.
    Fail,
    /// The plugin is skipped (the failure is logged).
    Ignore,
}

/// One link: a named plugin slot.
struct Link {
    name: String,
    path: PathBuf,
    config: BTreeMap<String, String>,
    limits: Limits,
    failure_policy: FailurePolicy,
    current: ArcSwap<AdmissionPlugin>,
}

/// The admission chain. Cheap to share behind an `Arc`.
pub struct AdmissionChain {
    engine: PluginEngine,
    links: ArcSwap<Vec<Arc<Link>>>,
}

impl std::fmt::Debug for AdmissionChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.links.load().iter().map(|l| l.name.clone()).collect();
        f.debug_struct("AdmissionChain")
            .field("links", &names)
            .finish()
    }
}

/// The reason a chain gives when a plugin with [`FailurePolicy::Fail`] fails.
pub const PLUGIN_ERROR_REASON: &str = "AdmissionPluginError";

impl AdmissionChain {
    /// An empty chain on `engine`.
    pub fn new(engine: PluginEngine) -> Self {
        Self {
            engine,
            links: ArcSwap::from_pointee(Vec::new()),
        }
    }

    /// Loads `path` as the last link, named `name`.
    pub fn push(
        &self,
        name: &str,
        path: &Path,
        config: BTreeMap<String, String>,
        limits: Limits,
        failure_policy: FailurePolicy,
    ) -> Result<(), PluginError> {
        let plugin = self
            .engine
            .load_admission(name, path, config.clone(), limits.clone())?;
        let link = Arc::new(Link {
            name: name.to_owned(),
            path: path.to_owned(),
            config,
            limits,
            failure_policy,
            current: ArcSwap::from_pointee(plugin),
        });
        self.links.rcu(|links| {
            let mut next: Vec<Arc<Link>> =
                links.iter().filter(|l| l.name != name).cloned().collect();
            next.push(link.clone());
            next
        });
        Ok(())
    }

    /// Replaces link `name` with the component at `path` (or, with `None`, reloads its
    /// own file). On error nothing changes and the old version keeps serving.
    pub async fn replace(
        &self,
        name: &str,
        path: Option<&Path>,
    ) -> Result<Arc<AdmissionPlugin>, ReplaceError> {
        let link = self
            .links
            .load()
            .iter()
            .find(|l| l.name == name)
            .cloned()
            .ok_or_else(|| ReplaceError::Unknown(name.to_owned()))?;
        let path = path.unwrap_or(&link.path).to_owned();
        let engine = self.engine.clone();
        let (config, limits) = (link.config.clone(), link.limits.clone());
        let owned = name.to_owned();
        // Compiling takes tens of milliseconds of CPU: keep it off the async workers.
        let plugin = tokio::task::spawn_blocking(move || {
            engine.load_admission(&owned, &path, config, limits)
        })
        .await
        .map_err(|e| ReplaceError::Join(e.to_string()))??;
        let plugin = Arc::new(plugin);
        link.current.store(plugin.clone());
        tracing::info!(
            plugin = name,
            digest = plugin.digest(),
            "admission plugin replaced"
        );
        Ok(plugin)
    }

    /// Removes link `name`; calls in flight on it finish.
    pub fn remove(&self, name: &str) -> bool {
        let mut removed = false;
        self.links.rcu(|links| {
            let next: Vec<Arc<Link>> = links.iter().filter(|l| l.name != name).cloned().collect();
            removed = next.len() != links.len();
            next
        });
        removed
    }

    /// The links' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.links.load().iter().map(|l| l.name.clone()).collect()
    }

    /// The plugin currently serving link `name`.
    pub fn current(&self, name: &str) -> Option<Arc<AdmissionPlugin>> {
        self.links
            .load()
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.current.load_full())
    }

    /// Runs the chain: the first rejection wins; a failing plugin rejects or is skipped
    /// according to its failure policy. Returns the verdict and the link that decided a
    /// rejection.
    pub async fn admit(
        &self,
        pod: &Pod,
        node: &Node,
        usage: &NodeUsage,
        pod_json: impl Fn() -> String + Clone + Send + 'static,
    ) -> (Verdict, Option<String>) {
        let links = self.links.load_full();
        for link in links.iter() {
            let plugin = link.current.load_full();
            match plugin.admit(pod, node, usage, pod_json.clone()).await {
                Ok(Verdict::Admit) => {}
                Ok(rejection) => return (rejection, Some(link.name.clone())),
                Err(e) => match link.failure_policy {
                    FailurePolicy::Ignore => {
                        tracing::warn!(plugin = %link.name, error = %e, "admission plugin failed; ignored by its failure policy");
                    }
                    FailurePolicy::Fail => {
                        let rejection = Rejection {
                            reason: PLUGIN_ERROR_REASON.to_owned(),
                            message: e.to_string(),
                        };
                        return (Verdict::Reject(rejection), Some(link.name.clone()));
                    }
                },
            }
        }
        (Verdict::Admit, None)
    }
}

/// Why a replacement was refused (the old version keeps serving).
#[derive(Debug, thiserror::Error)]
pub enum ReplaceError {
    /// No link has that name.
    #[error("no admission plugin named {0:?}")]
    Unknown(String),
    /// The new version could not be loaded.
    #[error(transparent)]
    Load(#[from] PluginError),
    /// The compile task died.
    #[error("compiling the new version failed: {0}")]
    Join(String),
}
