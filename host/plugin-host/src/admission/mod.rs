//! Admission policies: the pod and node lent to a guest as `pod-view` and `node-view`,
//! and [`AdmissionPlugin`], which decides on reused or fresh instances.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wasmtime::Store;

use crate::bindings::exports::wasmlet::plugin::admission::Verdict;
use crate::bindings::wasmlet::plugin::admission_input::{NodeView, PodView};
use crate::bindings::wasmlet::plugin::types::{
    Container, HostPortInUse, Node, NodeSelectorTerm, NodeUsage, Pod, ResourceList, Taint,
    Toleration,
};
use crate::engine::{LoadKind, PluginEngine, plugin_store};
use crate::error::PluginError;
use crate::host::PluginState;
use crate::limits::{InstanceMode, Limits};
use crate::loaded::{CallResult, Loaded, Plugin};
use crate::{bindings, resources};

/// What a node carries, as admission sees it: the usage summed over its active pods
/// and the host ports they hold. Cheap to clone.
#[derive(Debug, Clone)]
pub struct NodeLoad {
    /// Summed requests and pod count.
    pub usage: NodeUsage,
    /// Host ports held.
    pub host_ports: Arc<[HostPortInUse]>,
}

/// One pod's admission: the pod, the node it would join and what that node already
/// carries. A policy reads them field by field through the `pod-view` and `node-view`
/// resources (nothing is copied into a guest that it does not ask for). Made once per
/// pod and shared by every link of a chain: what a link works out for the pod (its
/// summed requests, its JSON) is worked out once.
pub struct Admission {
    pod: Arc<Pod>,
    node: Arc<Node>,
    load: NodeLoad,
    requests: std::sync::OnceLock<ResourceList>,
    json: std::sync::OnceLock<String>,
    make_json: Box<dyn Fn() -> String + Send + Sync>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("pod", &self.pod.name)
            .field("node", &self.node.name)
            .finish()
    }
}

impl Admission {
    /// The admission of `pod` to `node`, which carries `load`. `pod_json` makes the
    /// whole pod as Kubernetes JSON; it runs only if a policy asks, and once.
    pub fn new(
        pod: impl Into<Arc<Pod>>,
        node: impl Into<Arc<Node>>,
        load: NodeLoad,
        pod_json: impl Fn() -> String + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            pod: pod.into(),
            node: node.into(),
            load,
            requests: std::sync::OnceLock::new(),
            json: std::sync::OnceLock::new(),
            make_json: Box::new(pod_json),
        })
    }

    /// The pod under admission.
    pub fn pod(&self) -> &Arc<Pod> {
        &self.pod
    }

    /// The node it would join.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// What the node already carries.
    pub fn load(&self) -> &NodeLoad {
        &self.load
    }

    /// What the pod requests, summed the kubelet's way ([`resources::pod_requests`]).
    pub fn requests(&self) -> &ResourceList {
        self.requests
            .get_or_init(|| resources::pod_requests(&self.pod))
    }

    /// The pod as JSON, made on first use.
    pub fn json(&self) -> &str {
        self.json.get_or_init(|| (self.make_json)())
    }
}

/// A `pod-view` or `node-view` handle to lend the guest for one `admit` call. It stands
/// for the call's [`Admission`], which the store holds while the call runs, so the host
/// keeps no resource table for it (the handle's number is not looked at).
fn lent<T: 'static>() -> wasmtime::component::Resource<T> {
    wasmtime::component::Resource::new_borrow(0)
}

/// Idle instances kept per plugin in [`InstanceMode::Reused`].
const IDLE_PER_PLUGIN: usize = 8;

/// How long a reused instance is kept unused before it is dropped. A node admits in
/// bursts (a node starting, a deployment scaled): the instances a burst made are given
/// back once it is over — for a Python or JavaScript policy each holds megabytes of its
/// interpreter's heap — and the first decision after a quiet spell makes a new one.
pub const IDLE_INSTANCE_LIFETIME: std::time::Duration = std::time::Duration::from_secs(10);

impl PluginState {
    /// The admission the current call decides on. A guest holds a `pod-view` or
    /// `node-view` only while `admit` runs, when the host has set it; a read at any
    /// other time (which the component model's borrow rules prevent) traps.
    fn admission(&self) -> wasmtime::Result<&Admission> {
        self.admission
            .as_deref()
            .ok_or_else(|| wasmtime::format_err!("pod-view or node-view read outside admit"))
    }

    /// The pod the current call decides on.
    fn pod(&self) -> wasmtime::Result<&Pod> {
        Ok(&self.admission()?.pod)
    }

    /// The node the current call decides on.
    fn node(&self) -> wasmtime::Result<&Node> {
        Ok(&self.admission()?.node)
    }
}

type Lent<T> = wasmtime::component::Resource<T>;

impl bindings::wasmlet::plugin::admission_input::Host for PluginState {}

impl bindings::wasmlet::plugin::admission_input::HostPodView for PluginState {
    fn uid(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.uid.clone())
    }

    fn name(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.name.clone())
    }

    fn namespace(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.namespace.clone())
    }

    fn labels(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.pod()?.labels.clone())
    }

    fn annotations(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.pod()?.annotations.clone())
    }

    fn containers(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<Container>> {
        Ok(self.pod()?.containers.clone())
    }

    fn init_containers(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<Container>> {
        Ok(self.pod()?.init_containers.clone())
    }

    fn overhead(&mut self, _: Lent<PodView>) -> wasmtime::Result<ResourceList> {
        Ok(self.pod()?.overhead.clone())
    }

    fn requests(&mut self, _: Lent<PodView>) -> wasmtime::Result<ResourceList> {
        Ok(self.admission()?.requests().clone())
    }

    fn node_selector(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.pod()?.node_selector.clone())
    }

    fn required_node_affinity(
        &mut self,
        _: Lent<PodView>,
    ) -> wasmtime::Result<Vec<NodeSelectorTerm>> {
        Ok(self.pod()?.required_node_affinity.clone())
    }

    fn tolerations(&mut self, _: Lent<PodView>) -> wasmtime::Result<Vec<Toleration>> {
        Ok(self.pod()?.tolerations.clone())
    }

    fn host_network(&mut self, _: Lent<PodView>) -> wasmtime::Result<bool> {
        Ok(self.pod()?.host_network)
    }

    fn priority(&mut self, _: Lent<PodView>) -> wasmtime::Result<i32> {
        Ok(self.pod()?.priority)
    }

    fn static_pod(&mut self, _: Lent<PodView>) -> wasmtime::Result<bool> {
        Ok(self.pod()?.static_pod)
    }

    fn source(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.pod()?.source.clone())
    }

    fn whole(&mut self, _: Lent<PodView>) -> wasmtime::Result<Pod> {
        Ok(self.pod()?.clone())
    }

    fn json(&mut self, _: Lent<PodView>) -> wasmtime::Result<String> {
        Ok(self.admission()?.json().to_owned())
    }

    fn drop(&mut self, _: Lent<PodView>) -> wasmtime::Result<()> {
        Ok(())
    }
}

impl bindings::wasmlet::plugin::admission_input::HostNodeView for PluginState {
    fn name(&mut self, _: Lent<NodeView>) -> wasmtime::Result<String> {
        Ok(self.node()?.name.clone())
    }

    fn labels(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Vec<(String, String)>> {
        Ok(self.node()?.labels.clone())
    }

    fn taints(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Vec<Taint>> {
        Ok(self.node()?.taints.clone())
    }

    fn allocatable(&mut self, _: Lent<NodeView>) -> wasmtime::Result<ResourceList> {
        Ok(self.node()?.allocatable.clone())
    }

    fn usage(&mut self, _: Lent<NodeView>) -> wasmtime::Result<NodeUsage> {
        Ok(self.admission()?.load.usage.clone())
    }

    fn host_ports_in_use(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Vec<HostPortInUse>> {
        Ok(self.admission()?.load.host_ports.to_vec())
    }

    fn whole(&mut self, _: Lent<NodeView>) -> wasmtime::Result<Node> {
        Ok(self.node()?.clone())
    }

    fn drop(&mut self, _: Lent<NodeView>) -> wasmtime::Result<()> {
        Ok(())
    }
}

/// A loaded admission policy.
pub struct AdmissionPlugin {
    policy: Arc<Policy>,
}

/// What an [`AdmissionPlugin`] is; shared with the background tasks that prepare its
/// next fresh instances.
struct Policy {
    loaded: Loaded,
    pre: bindings::AdmissionPolicyPre<PluginState>,
    /// Instances kept between calls ([`InstanceMode::Reused`]).
    idle: std::sync::Mutex<Vec<Warm>>,
    /// Instances made ahead of calls and never called yet ([`InstanceMode::PerCall`]).
    spares: std::sync::Mutex<Vec<Warm>>,
    /// Whether a background task is tearing down a used instance and making a spare.
    retiring: AtomicBool,
    /// Whether a background task is dropping idle instances as they expire.
    expiring: AtomicBool,
}

impl Plugin for AdmissionPlugin {
    fn loaded(&self) -> &Loaded {
        &self.policy.loaded
    }
}

/// An instance with its store: kept for reuse, or made ahead as a spare.
struct Warm {
    store: Store<PluginState>,
    bindings: bindings::AdmissionPolicy,
    /// When its last call ended (when it was made, for a spare).
    used_at: tokio::time::Instant,
}

/// Fresh instances made ahead per [`InstanceMode::PerCall`] policy: decisions that come
/// one after another each find one ready; calls that overlap make their own.
const SPARES: usize = 1;

impl std::fmt::Debug for AdmissionPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionPlugin")
            .field("name", &self.name())
            .field("limits", self.limits())
            .finish()
    }
}

/// Takes an instance from `list`, if it has one.
fn take(list: &std::sync::Mutex<Vec<Warm>>) -> Option<Warm> {
    list.lock().unwrap_or_else(|e| e.into_inner()).pop()
}

/// Puts an instance into `list` unless it already holds `max`.
fn keep(list: &std::sync::Mutex<Vec<Warm>>, warm: Warm, max: usize) {
    let mut list = list.lock().unwrap_or_else(|e| e.into_inner());
    if list.len() < max {
        list.push(warm);
    }
}

impl Policy {
    /// A new instance in a new store with this plugin's limits and the deadline
    /// callback: every epoch tick the guest yields to the async runtime (a long call
    /// never starves the other tasks) and is cut off once its call's deadline has passed.
    async fn instantiate(&self) -> Result<Warm, PluginError> {
        let started = std::time::Instant::now();
        let l = &self.loaded;
        let _running = l.running();
        let mut store = plugin_store(&l.engine, l.state(l.limits.deadline, None));
        let made = self.pre.instantiate_async(&mut store).await;
        let bindings = l.finish(&mut store, "admit", l.limits.deadline, made)?;
        self.loaded.instantiated(started);
        Ok(Warm {
            store,
            bindings,
            used_at: tokio::time::Instant::now(),
        })
    }

    /// Drops the idle instances unused for [`IDLE_INSTANCE_LIFETIME`], on a background
    /// task that lives while there are idle instances (one per plugin; none without a
    /// runtime, where instances are simply kept). It holds the policy weakly: an
    /// unloaded policy's instances go with it.
    fn expire_idle(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.expiring.swap(true, Ordering::AcqRel) {
            return;
        }
        let policy = Arc::downgrade(self);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(IDLE_INSTANCE_LIFETIME).await;
                let Some(policy) = policy.upgrade() else {
                    return;
                };
                let now = tokio::time::Instant::now();
                let mut idle = policy.idle.lock().unwrap_or_else(|e| e.into_inner());
                idle.retain(|w| now.duration_since(w.used_at) < IDLE_INSTANCE_LIFETIME);
                if idle.is_empty() {
                    drop(idle);
                    policy.page_out_code();
                    // An instance kept from here on starts a task of its own.
                    policy.expiring.store(false, Ordering::Release);
                    return;
                }
            }
        });
    }

    /// Once a large plugin has no instance left, the pages of its compiled code (and of
    /// its memory image, mapped from the same cache entry) leave the agent's resident
    /// memory until its next call reads them back: a Python or JavaScript policy's
    /// interpreter kept 20–30 MB resident that a node admitting a pod now and then does
    /// not need in between. Small plugins keep theirs (a megabyte at most, read on every
    /// admission); one compiled without a cache has no file to read its pages back from,
    /// and keeps them too.
    fn page_out_code(&self) {
        let image = self.pre.instance_pre().component().image_range();
        let size = image.end as usize - image.start as usize;
        if size >= crate::backend::BASELINE_FROM_BYTES {
            let bytes = crate::memory::page_out_file_at(image.start);
            tracing::debug!(
                plugin = &*self.loaded.name,
                bytes,
                "an idle plugin's code paged out"
            );
        }
    }

    /// Makes a spare fresh instance for a later call, unless there are enough.
    async fn make_spare(&self) {
        if self.spares.lock().unwrap_or_else(|e| e.into_inner()).len() >= SPARES {
            return;
        }
        match self.instantiate().await {
            Ok(spare) => keep(&self.spares, spare, SPARES),
            // The next call instantiates for itself and reports the error.
            Err(e) => tracing::debug!(plugin = &*self.loaded.name, "spare instance: {e}"),
        }
    }
}

impl AdmissionPlugin {
    /// Instances kept for reuse between calls ([`InstanceMode::Reused`]: at most 8,
    /// each dropped once unused for [`IDLE_INSTANCE_LIFETIME`]).
    pub fn idle_instances(&self) -> usize {
        self.policy
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Fresh instances made ahead and not yet used ([`InstanceMode::PerCall`]: at most
    /// one, made on a background task after a call).
    pub fn spare_instances(&self) -> usize {
        self.policy
            .spares
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Decides on `admission`, in a fresh instance or a reused one as its limits say.
    pub async fn admit(&self, admission: &Arc<Admission>) -> Result<Verdict, PluginError> {
        let started = std::time::Instant::now();
        let result = self.decide(admission).await;
        self.policy.loaded.record(
            started,
            match &result {
                Ok(Verdict::Admit) => CallResult::Passed,
                Ok(Verdict::Reject(_)) => CallResult::Failed,
                Err(_) => CallResult::Error,
            },
        );
        result
    }

    /// One decision. A reused instance goes back to the idle list when its call
    /// succeeded. A fresh instance serves one call only: a spare made ahead of the call
    /// when there is one (instantiating is then off the decision's path), and once
    /// the call is over, the used instance is torn down and the next spare made on a
    /// background task.
    async fn decide(&self, admission: &Arc<Admission>) -> Result<Verdict, PluginError> {
        const CALL: &str = "admit";
        let policy = &self.policy;
        let _running = policy.loaded.running();
        let limits = self.limits();
        let reuse = limits.instances == InstanceMode::Reused;
        let ready = take(if reuse { &policy.idle } else { &policy.spares });
        let mut warm = match ready {
            Some(mut warm) => {
                warm.store.data_mut().deadline_at = std::time::Instant::now() + limits.deadline;
                warm
            }
            None => policy.instantiate().await?,
        };
        warm.store.set_epoch_deadline(1);
        warm.store.data_mut().admission = Some(admission.clone());
        let verdict = warm
            .bindings
            .wasmlet_plugin_admission()
            .call_admit(&mut warm.store, lent(), lent())
            .await;
        let verdict = policy
            .loaded
            .finish(&mut warm.store, CALL, limits.deadline, verdict);
        warm.store.data_mut().admission = None;
        if reuse {
            // Only an instance whose call succeeded goes back; a trapped one is dropped.
            if verdict.is_ok() {
                warm.used_at = tokio::time::Instant::now();
                keep(&policy.idle, warm, IDLE_PER_PLUGIN);
                policy.expire_idle();
            }
        } else {
            self.retire(warm);
        }
        verdict
    }

    /// Tears down a used fresh instance and makes the next spare on a background task,
    /// so that the caller waits for neither. One such task at a time: when decisions
    /// come faster than it works (or there is no runtime to run it), the caller tears
    /// its instance down itself and the next call instantiates for itself — used
    /// instances never pile up.
    fn retire(&self, used: Warm) {
        let policy = &self.policy;
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !policy.retiring.swap(true, Ordering::AcqRel) => runtime,
            _ => return drop(used),
        };
        let policy = policy.clone();
        runtime.spawn(async move {
            drop(used);
            policy.make_spare().await;
            policy.retiring.store(false, Ordering::Release);
        });
    }
}

impl PluginEngine {
    /// Compiles the component at `path` as admission policy `name`, checking that it
    /// implements the `admission-policy` world.
    pub fn load_admission(
        &self,
        name: &str,
        path: &Path,
        config: BTreeMap<String, String>,
        limits: Limits,
    ) -> Result<AdmissionPlugin, PluginError> {
        let kind = LoadKind {
            label: "admission",
            world: crate::backend::World::Admission,
            world_name: "admission-policy",
        };
        let (loaded, pre) = self.load_as(
            name,
            path,
            kind,
            config,
            limits,
            bindings::AdmissionPolicyPre::new,
        )?;
        Ok(AdmissionPlugin {
            policy: Arc::new(Policy {
                loaded,
                pre,
                idle: std::sync::Mutex::new(Vec::new()),
                spares: std::sync::Mutex::new(Vec::new()),
                retiring: AtomicBool::new(false),
                expiring: AtomicBool::new(false),
            }),
        })
    }
}
