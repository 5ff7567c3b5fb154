//! The syncLoop: one `select!` over its typed [`Inputs`], each arm one named handler.
//!
//! | input | handler |
//! |---|---|
//! | a source's new set of pods | [`SyncLoop::handle_config`]: merge, then ADD (admission, then a worker), UPDATE, RECONCILE, REMOVE |
//! | PLEG events | [`SyncLoop::handle_pleg`]: status from the cache at once, then a sync of the pod |
//! | probe results | [`SyncLoop::handle_probes`]: status; liveness / startup failures sync the pod (restart) |
//! | pods due (back-off expiry, retries, resync every syncFrequency) and the 1 s tick | [`SyncLoop::handle_due`] |
//! | housekeeping every 2 s | [`SyncLoop::housekeeping`]: orphans stopped, finished workers forgotten, dead containers collected, gauges |

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wasmlet_cri::CriRuntime;
use wasmlet_plugin_host::chain::{AdmissionChain, WouldReject};
use wasmlet_plugin_host::source::{Problem, SourcePod};
use wasmlet_plugin_host::{Verdict, convert};

use crate::events::Event;
use crate::metrics::{ContainerState, Source};
use crate::pleg::EventQueue;
use crate::prober::{Kind, ProbeUpdate};
use crate::queue::PodQueue;
use crate::sync::SyncContext;
use crate::workers::{DueQueue, PodWorkers};
use wasmlet_core::lifecycle::Lifecycle;
use wasmlet_core::pod::{self, PodKey};
use wasmlet_core::podconfig::{Op, PodConfig, PodUpdate};
use wasmlet_core::runtime::{PodRuntime, State};

/// The reason of the event a policy in Monitor mode leaves on a pod it would have
/// rejected.
pub const WOULD_REJECT_REASON: &str = "PolicyWouldReject";

/// The 1 s sync tick.
pub const SYNC_TICK: Duration = Duration::from_secs(1);
/// Housekeeping period.
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);

/// A source's whole new set of pods.
#[derive(Debug, Clone, Default)]
pub struct SourceSet {
    /// The source's name.
    pub source: String,
    /// Its pods (those in `unchanged` aside).
    pub pods: Vec<SourcePod>,
    /// UIDs of pods the source still has exactly as in its last set: part of the set,
    /// not sent again (the API source's sets, where one pod changes at a time).
    pub unchanged: Vec<String>,
    /// Manifests it could not read (their pods are kept as they were).
    pub problems: Vec<Problem>,
    /// The source is gone (a cluster plugin deleted or no longer for this node): its
    /// pods are removed and the source forgotten. A set from a source the loop does not
    /// know adds it, after the configured ones.
    pub removed: bool,
    /// The manifest directory the source reads, if any: a static pod's UID is the one
    /// the kubelet gives the file there.
    pub directory: Option<std::path::PathBuf>,
}

impl SourceSet {
    /// All of source `source`'s pods, nothing left out or unreadable.
    pub fn whole(source: impl Into<String>, pods: Vec<SourcePod>) -> Self {
        Self {
            source: source.into(),
            pods,
            ..Self::default()
        }
    }
}

/// Everything that wakes the loop.
pub struct Inputs {
    /// Sources' sets.
    pub config: mpsc::Receiver<SourceSet>,
    /// PLEG events.
    pub pleg: Arc<EventQueue>,
    /// Probe result changes.
    pub probes: Arc<PodQueue<ProbeUpdate>>,
    /// Pods whose sync is due.
    pub due: Arc<DueQueue>,
    /// Becomes true to stop the loop (running pods keep running).
    pub shutdown: CancellationToken,
}

/// The admission chain and the node it admits onto.
pub struct Admission {
    /// The chain.
    pub chain: Arc<AdmissionChain>,
    /// The node, as the plugins see it.
    pub node: Arc<wasmlet_plugin_host::Node>,
    /// The pods admitted, as the plugins see them: the load a new pod is admitted
    /// beside, and what an audit of a policy asks about.
    pub admitted: Arc<wasmlet_plugin_host::Admitted>,
    /// The node's own check before the chain (the eviction manager's: no new pods
    /// under disk pressure, no BestEffort ones under memory pressure): `Some((reason,
    /// message))` rejects.
    pub node_check: Option<NodeCheck>,
}

/// A host-side admission check: `Some((reason, message))` rejects the pod.
pub type NodeCheck = Arc<dyn Fn(&k8s::Pod) -> Option<(String, String)> + Send + Sync>;

/// What woke the loop.
enum Wake {
    Shutdown,
    Config(Option<SourceSet>),
    Pleg,
    Probes,
    Due,
    Housekeeping,
}

/// The loop's state.
pub struct SyncLoop<R> {
    ctx: Arc<SyncContext<R>>,
    workers: Arc<PodWorkers<R>>,
    config: PodConfig,
    admission: Option<Admission>,
    /// Problems already reported, by source: a bad manifest is logged once, not on
    /// every poll.
    reported: BTreeMap<String, Vec<String>>,
}

impl<R: CriRuntime + 'static> SyncLoop<R> {
    /// A loop over `sources` (their order is their precedence).
    pub fn new(
        ctx: Arc<SyncContext<R>>,
        workers: Arc<PodWorkers<R>>,
        sources: Vec<String>,
        admission: Option<Admission>,
    ) -> Self {
        let node = ctx.node.node_name.clone();
        SyncLoop {
            ctx,
            workers,
            config: PodConfig::new(&node, sources),
            admission,
            reported: BTreeMap::new(),
        }
    }

    /// Runs until shutdown.
    pub async fn run(mut self, mut inputs: Inputs) {
        let mut tick = tokio::time::interval(SYNC_TICK);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_PERIOD);
        housekeeping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let far = Duration::from_secs(3600);
        loop {
            let next_due = inputs.due.next().unwrap_or_else(|| Instant::now() + far);
            let wake = tokio::select! {
                () = inputs.shutdown.cancelled() => Wake::Shutdown,
                set = inputs.config.recv() => Wake::Config(set),
                () = inputs.pleg.wait() => Wake::Pleg,
                () = inputs.probes.wait() => Wake::Probes,
                () = tokio::time::sleep_until(next_due) => Wake::Due,
                () = inputs.due.changed() => continue,
                _ = tick.tick() => Wake::Due,
                _ = housekeeping.tick() => Wake::Housekeeping,
            };
            let started = Instant::now();
            let source = match wake {
                Wake::Shutdown => {
                    info!("syncLoop stopping; pods keep running");
                    return;
                }
                Wake::Config(None) => return,
                Wake::Config(Some(set)) => {
                    self.handle_config(set).await;
                    "config"
                }
                Wake::Pleg => {
                    self.handle_pleg(&inputs.pleg);
                    "pleg"
                }
                Wake::Probes => {
                    self.handle_probes(&inputs.probes);
                    "probe"
                }
                Wake::Due => {
                    self.handle_due(&inputs.due);
                    "sync"
                }
                Wake::Housekeeping => {
                    self.housekeeping();
                    "housekeeping"
                }
            };
            self.ctx
                .metrics
                .loop_iteration
                .get_or_create(&Source {
                    source: source.to_owned(),
                })
                .observe(started.elapsed().as_secs_f64());
        }
    }

    fn log_update(update: &PodUpdate) {
        let pods: Vec<String> = update
            .pods
            .iter()
            .map(|p| PodKey::of(p).to_string())
            .collect();
        info!(
            "SyncLoop ({}, \"{}\"): {}",
            update.op,
            update.source,
            pods.join(", ")
        );
    }

    /// A source's new set: merged, then each change handled.
    pub async fn handle_config(&mut self, set: SourceSet) {
        let broken: Vec<String> = set.problems.iter().map(|p| p.origin.clone()).collect();
        let merged = if set.removed {
            self.config.remove_source(&set.source)
        } else {
            self.config.add_source(&set.source);
            self.config
                .set_directory(&set.source, set.directory.clone());
            let seen = crate::time::now_rfc3339();
            self.config
                .set_with(&set.source, set.pods, &set.unchanged, &broken, &seen)
        };
        self.ctx.sources_ready.store(
            self.config.all_sources_ready(),
            std::sync::atomic::Ordering::Relaxed,
        );
        let messages: Vec<String> = set
            .problems
            .iter()
            .map(|p| p.to_string())
            .chain(merged.problems.iter().map(|p| p.to_string()))
            .collect();
        let before = self.reported.insert(set.source.clone(), messages.clone());
        for m in &messages {
            if !before.as_ref().is_some_and(|b| b.contains(m)) {
                warn!(source = %set.source, "skipping a pod: {m}");
            }
        }
        for update in merged.updates {
            Self::log_update(&update);
            for pod in update.pods {
                match update.op {
                    Op::Add => self.add(pod, &update.source).await,
                    Op::Update => {
                        self.ctx.statuses.set_pod(pod.clone());
                        if !self.is_rejected(&pod) {
                            self.workers.update(pod);
                        }
                    }
                    Op::Reconcile => {
                        // A readiness gate's condition set through the API changes Ready
                        // at once, not at the pod's next sync.
                        let gated = !pod::gate_conditions(&pod).is_empty();
                        let uid = pod::uid(&pod).to_owned();
                        self.ctx.statuses.set_pod(pod);
                        if gated {
                            self.ctx.update_status(&uid);
                        }
                    }
                    Op::Remove => self.remove(pod),
                    Op::Delete => self.delete(pod),
                }
            }
        }
    }

    fn is_rejected(&self, pod: &k8s::Pod) -> bool {
        self.ctx
            .statuses
            .get(pod::uid(pod))
            .is_some_and(|e| e.rejected)
    }

    async fn add(&mut self, pod: Arc<k8s::Pod>, source: &str) {
        self.ctx.statuses.set_pod(pod.clone());
        if let Some((reason, message)) = self.refusal(&pod, source).await {
            self.reject(&pod, &reason, &message);
            return;
        }
        self.workers.add(pod);
    }

    /// Why `pod` is not admitted, in the kubelet's order: the node's own checks, the
    /// devices its containers ask for (given now, as the kubelet gives them), then the
    /// plugins' chain. `None` admits it.
    async fn refusal(&mut self, pod: &Arc<k8s::Pod>, source: &str) -> Option<(String, String)> {
        let check = self.admission.as_ref().and_then(|a| a.node_check.as_ref());
        if let Some((reason, message)) = check.and_then(|c| c(pod)) {
            warn!(pod = %PodKey::of(pod), %reason, "Pod was rejected: {message}");
            return Some((reason, message));
        }
        if let Some(devices) = &self.ctx.devices {
            let workers = &self.workers;
            let ready = self
                .ctx
                .sources_ready
                .load(std::sync::atomic::Ordering::Relaxed);
            if let Err(e) = devices
                .admit(pod, ready, |uid| workers.is_active(uid))
                .await
            {
                let message = format!("Allocate failed due to {e}, which is unexpected");
                warn!(pod = %PodKey::of(pod), "Pod was rejected: {message}");
                return Some(("UnexpectedAdmissionError".into(), message));
            }
        }
        let admission = self.admission.as_ref()?;
        let converted = match convert::pod(pod, source) {
            Ok(p) => p,
            Err(e) => return Some(("UnexpectedAdmissionError".into(), e.to_string())),
        };
        let load = admission.admitted.load();
        // The pod as JSON only for a policy that asks (made once for the chain).
        let whole = pod.clone();
        let candidate = wasmlet_plugin_host::Admission::new(
            converted,
            admission.node.clone(),
            load,
            move || serde_json::to_string(&*whole).unwrap_or_default(),
        );
        let decision = admission.chain.decide(&candidate).await;
        for would in &decision.monitored {
            self.would_reject(pod, would);
        }
        if let Verdict::Reject(r) = decision.verdict {
            let plugin = decision.by.unwrap_or_default();
            warn!(pod = %PodKey::of(pod), %plugin, reason = %r.reason, "Pod was rejected: {}", r.message);
            return Some((r.reason, r.message));
        }
        let pod_uid = pod::uid(pod);
        admission
            .admitted
            .insert(pod_uid, candidate.pod().clone(), pod.clone());
        None
    }

    /// What a policy in Monitor mode would have rejected: said in the log and in an
    /// event on the pod, which runs all the same.
    fn would_reject(&self, pod: &Arc<k8s::Pod>, would: &WouldReject) {
        let (plugin, r) = (&would.plugin, &would.rejection);
        info!(pod = %PodKey::of(pod), %plugin, reason = %r.reason, "Pod would be rejected by a policy in Monitor mode (admitted): {}", r.message);
        let message = format!(
            "{plugin} (Monitor mode) would reject the pod: {}: {}",
            r.reason, r.message
        );
        self.ctx
            .events
            .record(Event::warning(pod, None, WOULD_REJECT_REASON, message));
    }

    fn reject(&self, pod: &Arc<k8s::Pod>, reason: &str, message: &str) {
        self.ctx.metrics.admission_rejections.inc();
        self.ctx
            .events
            .record(Event::warning(pod, None, reason, message.to_owned()));
        self.ctx
            .statuses
            .reject(pod.clone(), reason, message, &self.ctx.node.host_ip);
    }

    /// Takes pod `uid` out of the admitted pods.
    fn forget(&self, uid: &str) {
        if let Some(a) = &self.admission {
            a.admitted.remove(uid);
        }
    }

    /// A pod its source no longer has: stopped within its grace period. A static pod
    /// that ran stays in the status manager until then (its mirror pod stays, and a
    /// new static pod of its name waits); one still waiting to start is just dropped.
    fn remove(&mut self, pod: Arc<k8s::Pod>) {
        let uid = pod::uid(&pod).to_owned();
        self.forget(&uid);
        self.workers.drop_held(&uid);
        if self.workers.is_active(&uid) && pod::is_static(&pod) {
            self.ctx.statuses.retire(&uid);
        } else {
            self.ctx.statuses.remove(&uid);
        }
        let grace = Duration::from_secs(u64::try_from(pod::grace_seconds(&pod)).unwrap_or(0));
        if self.workers.lifecycle(&uid).is_some() {
            self.workers.kill(pod, grace);
        }
    }

    /// A pod the API server is deleting: stopped within its deletion grace period and
    /// cleaned up; its status stays (the last one is reported before the final delete).
    fn delete(&mut self, pod: Arc<k8s::Pod>) {
        let uid = pod::uid(&pod).to_owned();
        self.forget(&uid);
        self.ctx.statuses.set_pod(pod.clone());
        if self.is_rejected(&pod) {
            // Never ran: nothing to stop.
            self.ctx.statuses.reclaimed(&uid);
            return;
        }
        let grace = Duration::from_secs(u64::try_from(pod::grace_seconds(&pod)).unwrap_or(0));
        self.workers.kill(pod, grace);
    }

    /// PLEG events: the pod's status is recomputed from the cache at once, and the pod
    /// synced.
    pub fn handle_pleg(&mut self, queue: &EventQueue) {
        for (uid, events) in queue.take() {
            let key = match (self.ctx.statuses.get(&uid), self.ctx.cache.get(&uid)) {
                (Some(e), _) => PodKey::of(&e.pod),
                (None, rt) => PodKey {
                    uid: uid.clone(),
                    name: rt.as_ref().map(|r| r.name.clone()).unwrap_or_default(),
                    namespace: rt.map(|r| r.namespace.clone()).unwrap_or_default(),
                },
            };
            for e in &events {
                info!(
                    "SyncLoop (PLEG): {key}, event: {}, data: \"{}\"",
                    e.kind, e.id
                );
            }
            self.ctx.update_status(&uid);
            if self.workers.lifecycle(&uid).is_some() {
                self.workers.resync(&uid);
            }
        }
        self.ctx
            .metrics
            .pleg_coalesced
            .inner()
            .store(queue.coalesced(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Probe results: status, and a sync where a container must restart or has started.
    pub fn handle_probes(&mut self, queue: &PodQueue<ProbeUpdate>) {
        for (uid, updates) in queue.take() {
            self.ctx.update_status(&uid);
            // A failed liveness or startup probe restarts the container; a startup probe
            // that passed may let the next init container start (a sidecar started).
            let restart = updates.iter().any(|u| {
                matches!(u.kind, Kind::Startup) || (!u.ok && matches!(u.kind, Kind::Liveness))
            });
            for u in &updates {
                info!(
                    "SyncLoop (probe): pod {uid}, container {}, {:?} {}{}",
                    u.container,
                    u.kind,
                    if u.ok { "success" } else { "failure" },
                    if u.message.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", u.message)
                    }
                );
            }
            if restart {
                self.workers.resync(&uid);
            }
        }
    }

    /// Pods whose sync is due.
    pub fn handle_due(&mut self, due: &DueQueue) {
        for uid in due.take_due(Instant::now()) {
            self.workers.resync(&uid);
        }
    }

    /// Housekeeping: stops pods the runtime has that no source wants (once every
    /// source has reported), forgets finished workers of removed pods, starts workers
    /// for wanted pods that lost theirs, collects dead containers, updates gauges.
    pub fn housekeeping(&mut self) {
        self.ctx.allocations.flush();
        let runtime_pods = self.ctx.cache.all();
        if self.config.all_sources_ready() {
            self.stop_orphans(&runtime_pods);
            let config = &self.config;
            self.workers.remove_done(|uid| config.contains(uid));
            self.tidy_cgroups(&runtime_pods);
        }
        for pod in self.config.pods() {
            let uid = pod::uid(&pod);
            if self.workers.lifecycle(uid).is_none() && !self.is_rejected(&pod) {
                self.workers.add(pod.clone());
            }
        }
        for rt in &runtime_pods {
            if self.workers.lifecycle(&rt.uid) == Some(Lifecycle::Syncing) {
                let ctx = self.ctx.clone();
                let rt = rt.clone();
                tokio::spawn(async move { ctx.collect_garbage(&rt).await });
            }
        }
        self.count_running(&runtime_pods);
        let now = Instant::now();
        self.ctx
            .crash_backoff
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .gc(now);
    }

    /// Stops the pods the runtime has that no source wants and no worker has.
    fn stop_orphans(&mut self, runtime_pods: &[Arc<PodRuntime>]) {
        for rt in runtime_pods {
            if self.config.contains(&rt.uid) || self.workers.lifecycle(&rt.uid).is_some() {
                continue;
            }
            if rt.running().next().is_none()
                && rt.sandboxes.iter().all(|s| !s.ready)
                && rt.containers.is_empty()
                && rt.sandboxes.is_empty()
            {
                continue;
            }
            let mut stub = k8s::Pod::default();
            stub.metadata.uid = Some(rt.uid.clone());
            stub.metadata.name = Some(rt.name.clone());
            stub.metadata.namespace = Some(rt.namespace.clone());
            info!(pod = %PodKey::of(&stub), "stopping an orphaned pod no source wants");
            let grace =
                Duration::from_secs(u64::try_from(pod::DEFAULT_GRACE_SECONDS).unwrap_or(30));
            self.workers.kill(Arc::new(stub), grace);
        }
    }

    /// Removes pod cgroups left by pods that are gone (removed while the agent was down,
    /// or still busy when their pod was cleaned up), and sets the QoS tiers as the
    /// node's pods make them (the kubelet's periodic QoS update), in a task.
    fn tidy_cgroups(&self, runtime_pods: &[Arc<PodRuntime>]) {
        let Some(cgroups) = self.ctx.node.pod_cgroups.clone() else {
            return;
        };
        let active = self.config.pods();
        let known: HashSet<String> = runtime_pods
            .iter()
            .map(|rt| rt.uid.clone())
            .chain(active.iter().map(|p| pod::uid(p).to_owned()))
            .chain(self.workers.uids())
            .collect();
        tokio::spawn(async move {
            // Listing every hierarchy's tiers is blocking file-system work.
            let listing = cgroups.clone();
            let Ok(pods) = tokio::task::spawn_blocking(move || listing.pods()).await else {
                return;
            };
            for uid in pods.into_iter().filter(|u| !known.contains(u)) {
                // Judged again when removed: a pod may have started with this UID since.
                if cgroups
                    .remove_orphan(&uid)
                    .await
                    .is_some_and(|l| l.is_empty())
                {
                    info!(uid = %uid, "removed the cgroup of a pod that is gone");
                }
            }
            if let Err(e) = cgroups.reconcile(&active).await {
                warn!("updating the QoS cgroups: {e}");
            }
        });
    }

    /// The running pods and containers by state, as the kubelet's gauges count them.
    fn count_running(&self, runtime_pods: &[Arc<PodRuntime>]) {
        let mut running_pods = 0;
        let mut states: BTreeMap<&str, i64> = BTreeMap::new();
        for rt in runtime_pods {
            if rt.sandboxes.iter().any(|s| s.ready) {
                running_pods += 1;
            }
            for c in &rt.containers {
                let state = match c.state {
                    State::Running => "running",
                    State::Exited => "exited",
                    State::Created => "created",
                    State::Unknown => "unknown",
                };
                *states.entry(state).or_default() += 1;
            }
        }
        self.ctx.metrics.running_pods.set(running_pods);
        for state in ["running", "exited", "created", "unknown"] {
            self.ctx
                .metrics
                .running_containers
                .get_or_create(&ContainerState {
                    container_state: state.to_owned(),
                })
                .set(states.get(state).copied().unwrap_or(0));
        }
    }
}
