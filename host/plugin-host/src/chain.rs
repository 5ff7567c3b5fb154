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
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

use crate::admission::{Admission, AdmissionPlugin};
use crate::audit::Audit;
use crate::bindings::exports::wasmlet::plugin::admission::{Rejection, Verdict};
use crate::engine::PluginEngine;
use crate::error::PluginError;
use crate::limits::Limits;
use crate::loaded::Plugin;

/// What a chain does with a plugin that fails (traps, times out) instead of deciding,
/// as with Kubernetes admission webhooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The pod is rejected, reason `AdmissionPluginError`.
    Fail,
    /// The plugin is skipped (the failure is logged).
    Ignore,
}

/// Whether a link's rejections count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Its rejections reject the pod.
    #[default]
    Enforce,
    /// It decides on every pod but admits it: what it would have rejected is reported
    /// ([`Decision::monitored`]) and counted, so a policy can be watched before it
    /// enforces.
    Monitor,
}

/// A rejection a link in [`Mode::Monitor`] would have made.
#[derive(Debug, Clone)]
pub struct WouldReject {
    /// The link's name.
    pub plugin: String,
    /// Its rejection: the policy's own, or `AdmissionPluginError` when it failed under
    /// `failurePolicy: Fail`.
    pub rejection: Rejection,
}

/// What the chain decided on a pod.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Admitted, or the first enforcing link's rejection.
    pub verdict: Verdict,
    /// The link that rejected.
    pub by: Option<String>,
    /// What links in [`Mode::Monitor`] would have rejected, in chain order.
    pub monitored: Vec<WouldReject>,
}

/// How a link is loaded and what it does when its plugin fails.
#[derive(Debug, Clone)]
pub struct LinkSpec {
    /// The component file.
    pub path: PathBuf,
    /// The plugin's configuration values.
    pub config: BTreeMap<String, String>,
    /// Limits of each call.
    pub limits: Limits,
    /// What a failure of the plugin means for the pod.
    pub failure_policy: FailurePolicy,
    /// Whether its rejections count.
    pub mode: Mode,
}

/// What serves a link.
enum Slot {
    /// A loaded plugin.
    Ready(Serving),
    /// The plugin could not be loaded; the failure policy decides what that means.
    Unavailable(String),
}

/// A version serving a link, and what it would have rejected in [`Mode::Monitor`] since
/// it began serving.
struct Serving {
    plugin: Arc<AdmissionPlugin>,
    would_reject: AtomicU64,
}

impl Slot {
    fn ready(plugin: Arc<AdmissionPlugin>) -> Arc<Slot> {
        Arc::new(Slot::Ready(Serving {
            plugin,
            would_reject: AtomicU64::new(0),
        }))
    }
}

/// One link: a named plugin slot.
struct Link {
    name: String,
    spec: LinkSpec,
    current: ArcSwap<Slot>,
}

/// The admission chain. Cheap to share behind an `Arc`.
pub struct AdmissionChain {
    engine: PluginEngine,
    links: ArcSwap<Vec<Arc<Link>>>,
    /// The configured order: links named here come first, in this order; the others
    /// follow by name.
    order: std::sync::Mutex<Vec<String>>,
    /// The cluster's links (WasmletPlugins), after all of the node's, in this order.
    cluster_order: std::sync::Mutex<Vec<String>>,
}

impl std::fmt::Debug for AdmissionChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionChain")
            .field("links", &self.names())
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
            order: std::sync::Mutex::new(Vec::new()),
            cluster_order: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The engine the chain loads its plugins on.
    pub fn engine(&self) -> &PluginEngine {
        &self.engine
    }

    fn order(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.order.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the chain's order: links named in `order` first, in that order; the others
    /// after them, by name.
    pub fn set_order(&self, order: Vec<String>) {
        *self.order() = order;
        self.links
            .rcu(|links| self.sorted(links.iter().cloned().collect()));
    }

    /// Sets the order of the cluster's links, which follow all of the node's.
    pub fn set_cluster_order(&self, order: Vec<String>) {
        *self.cluster_order.lock().unwrap_or_else(|e| e.into_inner()) = order;
        self.links
            .rcu(|links| self.sorted(links.iter().cloned().collect()));
    }

    fn sorted(&self, mut links: Vec<Arc<Link>>) -> Vec<Arc<Link>> {
        let order = self.order();
        let cluster = self.cluster_order.lock().unwrap_or_else(|e| e.into_inner());
        // The node's configured links, then its directory's by name, then the cluster's.
        let rank = |name: &str| match order.iter().position(|n| n == name) {
            Some(i) => (0, i),
            None => cluster
                .iter()
                .position(|n| n == name)
                .map_or((1, 0), |i| (2, i)),
        };
        links.sort_by(|a, b| (rank(&a.name), &a.name).cmp(&(rank(&b.name), &b.name)));
        links
    }

    fn put(&self, name: &str, link: Arc<Link>) {
        self.links.rcu(|links| {
            let mut next: Vec<Arc<Link>> =
                links.iter().filter(|l| l.name != name).cloned().collect();
            next.push(link.clone());
            self.sorted(next)
        });
    }

    fn link(&self, name: &str) -> Option<Arc<Link>> {
        self.links.load().iter().find(|l| l.name == name).cloned()
    }

    /// Loads `path` as the last link, named `name` (replacing a link of that name).
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
        {
            let mut order = self.order();
            order.retain(|n| n != name);
            order.push(name.to_owned());
        }
        let spec = LinkSpec {
            path: path.to_owned(),
            config,
            limits,
            failure_policy,
            mode: Mode::Enforce,
        };
        self.put(name, Arc::new(Link::ready(name, spec, plugin)));
        Ok(())
    }

    /// Adds link `name`, or swaps the plugin serving it, from `spec`, compiling off the
    /// async workers. When the new version cannot be loaded nothing changes: an existing
    /// link keeps serving its old version.
    pub async fn install(
        &self,
        name: &str,
        spec: LinkSpec,
    ) -> Result<Arc<AdmissionPlugin>, ReplaceError> {
        let plugin = self.load(name, &spec).await?;
        match self.link(name) {
            // Same settings: swap the plugin in place, one atomic store.
            Some(link) if link.spec.same_settings(&spec) => {
                link.current.store(Slot::ready(plugin.clone()));
            }
            _ => self.put(name, Arc::new(Link::ready(name, spec, plugin.clone()))),
        }
        tracing::info!(
            plugin = name,
            digest = plugin.digest(),
            "admission plugin loaded"
        );
        Ok(plugin)
    }

    /// Makes link `name` unavailable for `why` in one step (adding it if absent): for a
    /// required plugin whose file went away. Calls already running finish on the old
    /// version; later ones meet the failure policy.
    pub fn set_unavailable(&self, name: &str, spec: LinkSpec, why: String) {
        match self.link(name) {
            Some(link) => link.current.store(Arc::new(Slot::Unavailable(why))),
            None => self.add_unavailable(name, spec, why),
        }
    }

    /// Adds link `name` as unavailable for `why` (its failure policy decides what that
    /// means for pods), unless a link of that name exists. For configured plugins that
    /// do not load: a required policy must not silently vanish from the chain.
    pub fn add_unavailable(&self, name: &str, spec: LinkSpec, why: String) {
        if self.link(name).is_none() {
            let link = Link {
                name: name.to_owned(),
                spec,
                current: ArcSwap::from_pointee(Slot::Unavailable(why)),
            };
            self.put(name, Arc::new(link));
        }
    }

    async fn load(
        &self,
        name: &str,
        spec: &LinkSpec,
    ) -> Result<Arc<AdmissionPlugin>, ReplaceError> {
        let engine = self.engine.clone();
        let (owned, spec) = (name.to_owned(), spec.clone());
        // Compiling takes tens of milliseconds of CPU: keep it off the async workers.
        let plugin = tokio::task::spawn_blocking(move || {
            engine.load_admission(&owned, &spec.path, spec.config, spec.limits)
        })
        .await
        .map_err(|e| ReplaceError::Join(e.to_string()))??;
        Ok(Arc::new(plugin))
    }

    /// Replaces link `name` with the component at `path` (or, with `None`, reloads its
    /// own file). On error nothing changes and the old version keeps serving.
    pub async fn replace(
        &self,
        name: &str,
        path: Option<&Path>,
    ) -> Result<Arc<AdmissionPlugin>, ReplaceError> {
        let link = self
            .link(name)
            .ok_or_else(|| ReplaceError::Unknown(name.to_owned()))?;
        let mut spec = link.spec.clone();
        if let Some(path) = path {
            spec.path = path.to_owned();
        }
        let plugin = self.load(name, &spec).await?;
        link.current.store(Slot::ready(plugin.clone()));
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

    /// The plugin currently serving link `name` (none when unknown or unavailable).
    pub fn current(&self, name: &str) -> Option<Arc<AdmissionPlugin>> {
        match &**self.link(name)?.current.load() {
            Slot::Ready(serving) => Some(serving.plugin.clone()),
            Slot::Unavailable(_) => None,
        }
    }

    /// Why link `name` is unavailable, when it is.
    pub fn unavailable(&self, name: &str) -> Option<String> {
        match &**self.link(name)?.current.load() {
            Slot::Ready(_) => None,
            Slot::Unavailable(why) => Some(why.clone()),
        }
    }

    /// The component file serving link `name` is expected at.
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.link(name).map(|l| l.spec.path.clone())
    }

    /// Runs the chain: the first rejection wins; a failing plugin rejects or is skipped
    /// according to its failure policy. Returns the verdict and the link that decided a
    /// rejection. What links in [`Mode::Monitor`] would have rejected: [`Self::decide`].
    pub async fn admit(&self, admission: &Arc<Admission>) -> (Verdict, Option<String>) {
        let decision = self.decide(admission).await;
        (decision.verdict, decision.by)
    }

    /// Runs the chain as [`Self::admit`] does, and says what its links in
    /// [`Mode::Monitor`] would have rejected (each counted in the plugin metrics).
    pub async fn decide(&self, admission: &Arc<Admission>) -> Decision {
        let links = self.links.load_full();
        let mut monitored = Vec::new();
        for link in links.iter() {
            let slot = link.current.load_full();
            let Some(rejection) = link.verdict(&slot, admission).await else {
                continue;
            };
            if link.spec.mode == Mode::Monitor {
                if let Slot::Ready(serving) = &*slot {
                    serving.would_reject.fetch_add(1, Ordering::Relaxed);
                }
                self.engine
                    .metrics()
                    .would_reject(&link.name, &rejection.reason);
                monitored.push(WouldReject {
                    plugin: link.name.clone(),
                    rejection,
                });
                continue;
            }
            return Decision {
                verdict: Verdict::Reject(rejection),
                by: Some(link.name.clone()),
                monitored,
            };
        }
        Decision {
            verdict: Verdict::Admit,
            by: None,
            monitored,
        }
    }

    /// What the version serving link `name` would have rejected in [`Mode::Monitor`]
    /// since it began serving (`None`: no such link, or it is unavailable).
    pub fn would_reject(&self, name: &str) -> Option<u64> {
        match &**self.link(name)?.current.load() {
            Slot::Ready(serving) => Some(serving.would_reject.load(Ordering::Relaxed)),
            Slot::Unavailable(_) => None,
        }
    }

    /// Asks link `name` alone about each of `pods` (`namespace/name` and its admission,
    /// as [`crate::Admitted::admissions`] makes them), whatever its mode, counting
    /// nothing in the metrics: what it would reject of what the node runs. A failing
    /// plugin's answer is its failure policy's. `None`: no such link.
    pub async fn audit(&self, name: &str, pods: &[(String, Arc<Admission>)]) -> Option<Audit> {
        let link = self.link(name)?;
        let slot = link.current.load_full();
        let mut audit = Audit::default();
        for (pod, admission) in pods {
            audit.add(pod, link.verdict(&slot, admission).await);
        }
        Some(audit)
    }
}

impl Link {
    /// The link's rejection of the pod, if it has one: the plugin's, or
    /// `AdmissionPluginError` when it failed and its failure policy is `Fail`.
    async fn verdict(&self, slot: &Slot, admission: &Arc<Admission>) -> Option<Rejection> {
        let error = match slot {
            Slot::Ready(serving) => match serving.plugin.admit(admission).await {
                Ok(Verdict::Admit) => return None,
                Ok(Verdict::Reject(rejection)) => return Some(rejection),
                Err(e) => e.to_string(),
            },
            Slot::Unavailable(why) => why.clone(),
        };
        match self.spec.failure_policy {
            FailurePolicy::Ignore => {
                tracing::warn!(plugin = %self.name, %error, "admission plugin failed; ignored by its failure policy");
                None
            }
            FailurePolicy::Fail => Some(Rejection {
                reason: PLUGIN_ERROR_REASON.to_owned(),
                message: error,
            }),
        }
    }
}

impl Link {
    fn ready(name: &str, spec: LinkSpec, plugin: impl Into<Arc<AdmissionPlugin>>) -> Self {
        Self {
            name: name.to_owned(),
            spec,
            current: ArcSwap::new(Slot::ready(plugin.into())),
        }
    }
}

impl LinkSpec {
    fn same_settings(&self, other: &LinkSpec) -> bool {
        self.path == other.path
            && self.config == other.config
            && self.limits.deadline == other.limits.deadline
            && self.limits.memory_bytes == other.limits.memory_bytes
            && self.limits.instances == other.limits.instances
            && self.failure_policy == other.failure_policy
            && self.mode == other.mode
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
