//! [`Agent`]: everything wired — the sync context, pod workers, PLEG with its relist
//! loop and the runtime's event stream, the prober and the syncLoop — running until
//! [`Agent::shutdown`]. Pods come in as [`SourceSet`]s through [`Agent::sources`]
//! (the source pollers in [`crate::sources`] feed it; tests can too).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wasmlet_cri::{CriRuntime, ErrorKind};
use wasmlet_plugin_host::kinds::PodSources;

use crate::backoff::Backoff;
use crate::cache::PodCache;
use crate::criconfig::{self, NodeContext};
use crate::events::{LogRecorder, Recorder};
use crate::metrics::Metrics;
use crate::node::NodeFacts;
use crate::pleg::{EventQueue, Health, Pleg};
use crate::prober::{Checker, Prober};
use crate::queue::PodQueue;
use crate::statuses::StatusManager;
use crate::sync::{ContainerOps, MOUNT_RETRY, MOUNT_RETRY_MAX, SyncContext};
use crate::syncloop::{Admission, Inputs, SourceSet, SyncLoop};
use crate::time::Clock;
use crate::workers::{DueQueue, PodWorkers};
use wasmlet_core::lifecycle::Lifecycle;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The node.
    pub node: NodeFacts,
    /// Where pod volumes and files go (`<root>/pods/<uid>`).
    pub root_dir: PathBuf,
    /// Where pod log directories go.
    pub pod_logs_dir: PathBuf,
    /// The resolver configuration pods inherit.
    pub resolv_conf: PathBuf,
    /// Each pod is synced again this long after its last sync (syncFrequency, 1m).
    pub sync_frequency: Duration,
    /// PLEG relist period (1 s).
    pub relist_period: Duration,
    /// The pod sources, in precedence order.
    pub sources: Vec<String>,
    /// The pods' cgroup tree (QoS tiers, pod limits, `podPidsLimit`); `None` leaves pods
    /// where the runtime puts them.
    pub pod_cgroups: Option<Arc<crate::cgroups::PodCgroups>>,
    /// What the node's cgroups add to each container (huge page limits, cgroup v2's
    /// `memory.oom.group` and `memory.swap.max`).
    pub node_cgroups: wasmlet_core::criconfig::NodeCgroups,
    /// Where events go; `None` writes them to the log.
    pub events: Option<Arc<dyn Recorder>>,
    /// Where configMap, secret and service account token volumes come from (the API
    /// server); `None`: pods that need them wait with a FailedMount event.
    pub volumes: Option<Arc<dyn crate::volumes::VolumeSource>>,
    /// Where the Services whose variables containers get come from (a watch of the API
    /// server's); `None`: no Service variables (a node without an API server).
    pub services: Option<Arc<dyn crate::criconfig::services::ServiceSource>>,
    /// The cluster's DNS (`clusterDNS`, `clusterDomain`) for ClusterFirst pods.
    pub cluster_dns: ClusterDns,
    /// At most this many RunPodSandbox / CreateContainer / StartContainer calls at once
    /// (0: no limit; [`crate::sync::pacing::default_limit`] is the config's default).
    pub start_parallelism: usize,
    /// The device plugins' manager: devices given to containers at admission and put
    /// into their configuration; `None`: no device plugins.
    pub devices: Option<Arc<wasmlet_devices::Manager>>,
}

/// The cluster's DNS as the node's configuration names it.
#[derive(Debug, Clone, Default)]
pub struct ClusterDns {
    /// The DNS servers' addresses (`clusterDNS`); empty: ClusterFirst pods use the
    /// node's resolver.
    pub servers: Vec<String>,
    /// The cluster's domain (`clusterDomain`), e.g. `cluster.local`.
    pub domain: String,
}

/// The runtime's state as the agent last saw it.
#[derive(Debug, Default)]
pub struct RuntimeState {
    ready: AtomicBool,
    message: Mutex<String>,
}

impl RuntimeState {
    /// Whether the last relist succeeded.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Why it is not ready.
    pub fn message(&self) -> String {
        self.message
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set(&self, ready: bool, message: String) {
        self.ready.store(ready, Ordering::Relaxed);
        *self.message.lock().unwrap_or_else(|p| p.into_inner()) = message;
    }
}

/// Why the node is not ready.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The container runtime does not answer (its message).
    #[error("{0}")]
    Runtime(String),
    /// PLEG has not relisted in time.
    #[error(transparent)]
    Pleg(#[from] crate::pleg::PlegUnhealthy),
}

/// A running agent.
pub struct Agent<R> {
    /// What the workers share (cache, statuses, prober, metrics).
    pub ctx: Arc<SyncContext<R>>,
    /// The pod workers.
    pub workers: Arc<PodWorkers<R>>,
    /// PLEG health.
    pub health: Arc<Health>,
    /// The runtime's state.
    pub runtime_state: Arc<RuntimeState>,
    /// The node.
    pub node: NodeFacts,
    sources: mpsc::Sender<SourceSet>,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl<R: CriRuntime + 'static> Agent<R> {
    /// Starts the agent on `runtime`. `checker` runs probes and hooks; `admission`, if
    /// given, decides on every new pod; `pod_sources`, if given, are polled (their names
    /// join `options.sources`).
    pub fn start(
        runtime: Arc<R>,
        mut options: AgentOptions,
        checker: Arc<dyn Checker>,
        admission: Option<Admission>,
        pod_sources: Option<Arc<PodSources>>,
    ) -> Self {
        if let Some(s) = &pod_sources {
            add_plugin_sources(&mut options.sources, s);
        }
        let cache = Arc::new(PodCache::new());
        let probe_updates = Arc::new(PodQueue::new());
        let ctx = sync_context(
            &runtime,
            checker,
            &options,
            cache.clone(),
            probe_updates.clone(),
        );
        let due = Arc::new(DueQueue::new());
        let workers = PodWorkers::new(ctx.clone(), due.clone(), options.sync_frequency);
        let (sources_tx, sources_rx) = mpsc::channel(64);
        let shutdown = CancellationToken::new();
        let started = start_pleg(runtime, &ctx, &options, cache, shutdown.clone());
        let (events, health, runtime_state) = (started.events, started.health, started.state);
        let mut tasks = Vec::from(started.tasks);
        if let Some(s) = pod_sources {
            tasks.extend(crate::sources::start(
                s,
                sources_tx.clone(),
                shutdown.clone(),
            ));
        }
        if let Some(changes) = options.volumes.as_ref().and_then(|v| v.changes()) {
            tasks.push(tokio::spawn(resync_on_volume_changes(
                changes,
                workers.clone(),
                shutdown.clone(),
            )));
        }
        let sync_loop = SyncLoop::new(ctx.clone(), workers.clone(), options.sources, admission);
        tasks.push(tokio::spawn(sync_loop.run(Inputs {
            config: sources_rx,
            pleg: events,
            probes: probe_updates,
            due,
            shutdown: shutdown.clone(),
        })));
        info!(node = %options.node.name, ip = %options.node.ip, "agent started");
        Agent {
            ctx,
            workers,
            health,
            runtime_state,
            node: options.node,
            sources: sources_tx,
            shutdown,
            tasks: Mutex::new(tasks),
        }
    }

    /// Where sources send their sets.
    pub fn sources(&self) -> mpsc::Sender<SourceSet> {
        self.sources.clone()
    }

    /// Whether every pod source has reported its pods at least once.
    pub fn sources_ready(&self) -> bool {
        self.ctx.sources_ready.load(Ordering::Relaxed)
    }

    /// `Ok` when the node is ready: the runtime answers and PLEG is healthy; otherwise
    /// why not.
    pub fn readiness(&self) -> Result<(), NotReady> {
        match (self.runtime_state.ready(), self.health.check()) {
            (true, Ok(())) => Ok(()),
            (false, _) => Err(NotReady::Runtime(self.runtime_state.message())),
            (_, Err(e)) => Err(NotReady::Pleg(e)),
        }
    }

    /// The node object with its Ready condition.
    pub fn node_object(&self) -> k8s_openapi::api::core::v1::Node {
        let readiness = self.readiness();
        let message = readiness
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        self.node
            .object(readiness.is_ok(), &message, &self.ctx.clock.now_rfc3339())
    }

    /// Ends pod `uid` because the node is short of a resource (the eviction manager):
    /// phase Failed with `reason` and `message`, a Warning event saying so, its
    /// containers stopped with `grace`; the pod stays until it is deleted. False if the
    /// pod is unknown or has ended already.
    pub fn evict(&self, uid: &str, reason: &str, message: &str, grace: Duration) -> bool {
        let statuses = &self.ctx.statuses;
        if !statuses.evict_with(uid, reason, message, Some(grace)) {
            return false;
        }
        if let Some(e) = statuses.get(uid) {
            self.ctx.events.record(crate::events::Event::warning(
                &e.pod,
                None,
                reason,
                message.to_owned(),
            ));
        }
        self.ctx.update_status(uid);
        self.workers.resync(uid);
        true
    }

    /// Stops the agent's loops; pods keep running.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        self.workers.stop();
        self.ctx.allocations.flush();
    }
}

impl<R> Drop for Agent<R> {
    /// A dropped agent's loops stop with it, as after [`Agent::shutdown`].
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Relists every `period`, or at once when the event stream wakes it. A runtime that
/// does not answer is retried with back-off (1 s doubling to 30 s) and marks the
/// runtime not ready; the agent never exits because of it.
async fn relist_loop<R: CriRuntime + 'static>(
    mut pleg: Pleg<R>,
    ctx: Arc<SyncContext<R>>,
    state: Arc<RuntimeState>,
    period: Duration,
    now: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut failures = 0u32;
    loop {
        if ctx.runtime_name.get().is_none()
            && let Ok(v) = ctx.runtime.version().await
        {
            let _ = ctx.runtime_name.set(v.runtime_name);
        }
        let started = Instant::now();
        let wait = match pleg.relist().await {
            Ok(_) => {
                ctx.metrics
                    .relist_duration
                    .observe(started.elapsed().as_secs_f64());
                if failures > 0 {
                    info!("container runtime is back");
                }
                failures = 0;
                ctx.relisted();
                state.set(true, String::new());
                period
            }
            Err(e) => {
                failures += 1;
                let message = format!("container runtime is down: {e}");
                if failures == 1 || failures.is_power_of_two() {
                    warn!("{message} (attempt {failures}; retrying)");
                }
                state.set(false, message);
                (Duration::from_secs(1) * 2u32.saturating_pow(failures.min(5) - 1))
                    .min(Duration::from_secs(30))
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = now.notified() => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Follows the runtime's container events where it has them (the simulator; not
/// containerd 1.6), waking the relist on each; relisting stays the safety net.
async fn event_stream<R: CriRuntime + 'static>(
    runtime: Arc<R>,
    relist: Arc<Notify>,
    shutdown: CancellationToken,
) {
    loop {
        match runtime.container_events().await {
            Ok(mut stream) => loop {
                tokio::select! {
                    item = stream.next() => match item {
                        Some(Ok(_)) => relist.notify_one(),
                        Some(Err(_)) | None => break,
                    },
                    () = shutdown.cancelled() => return,
                }
            },
            Err(e) if e.kind() == ErrorKind::Unimplemented => {
                info!("the runtime has no container event stream; relisting every second");
                return;
            }
            Err(_) => {}
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Syncs a running pod as soon as an object its volumes project changes (its volumes are
/// then brought up to date), rather than at its next periodic sync.
async fn resync_on_volume_changes<R: CriRuntime + 'static>(
    mut changes: tokio::sync::broadcast::Receiver<String>,
    workers: Arc<PodWorkers<R>>,
    shutdown: CancellationToken,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let uid = tokio::select! {
            uid = changes.recv() => uid,
            () = shutdown.cancelled() => return,
        };
        match uid {
            Ok(uid) if workers.lifecycle(&uid) == Some(Lifecycle::Syncing) => workers.resync(&uid),
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}

/// PLEG as started: its event queue, health and the runtime's state, and its two tasks.
struct StartedPleg {
    events: Arc<EventQueue>,
    health: Arc<Health>,
    state: Arc<RuntimeState>,
    tasks: [JoinHandle<()>; 2],
}

/// PLEG: the relist loop, woken early by the runtime's event stream.
fn start_pleg<R: CriRuntime + 'static>(
    runtime: Arc<R>,
    ctx: &Arc<SyncContext<R>>,
    options: &AgentOptions,
    cache: Arc<PodCache>,
    shutdown: CancellationToken,
) -> StartedPleg {
    let events = Arc::new(EventQueue::new());
    let health = Arc::new(Health::default());
    let state = Arc::new(RuntimeState::default());
    let relist_now = Arc::new(Notify::new());
    let pleg = Pleg::new(
        runtime.clone(),
        &options.node.name,
        cache,
        events.clone(),
        health.clone(),
    );
    let relist = tokio::spawn(relist_loop(
        pleg,
        ctx.clone(),
        state.clone(),
        options.relist_period,
        relist_now.clone(),
        shutdown.clone(),
    ));
    let stream = tokio::spawn(event_stream(runtime, relist_now, shutdown));
    StartedPleg {
        events,
        health,
        state,
        tasks: [relist, stream],
    }
}

/// The pod sources' names join `sources`, and the cluster's sources a restarted node
/// serves from its store too: their pods are not orphans before they have reported.
fn add_plugin_sources(sources: &mut Vec<String>, plugins: &PodSources) {
    let cluster = plugins.cluster_sources().into_keys();
    for name in plugins
        .configured()
        .iter()
        .map(|(n, _)| n.clone())
        .chain(cluster)
    {
        if !sources.contains(&name) {
            sources.push(name);
        }
    }
}

/// What the CRI configurations need of the node.
fn node_context(options: &AgentOptions) -> NodeContext {
    NodeContext {
        node_name: options.node.name.clone(),
        hostname: options.node.hostname.clone(),
        host_ip: options.node.ip.clone(),
        pod_logs_dir: options.pod_logs_dir.clone(),
        pods_dir: options.root_dir.join("pods"),
        dns: criconfig::node_dns(&options.resolv_conf),
        cluster_dns: options.cluster_dns.servers.clone(),
        cluster_domain: options.cluster_dns.domain.clone(),
        hosts_file: PathBuf::from(criconfig::ETC_HOSTS),
        memory_bytes: options.node.memory_bytes,
        allocatable: options.node.allocatable(),
        pod_cgroups: options.pod_cgroups.clone(),
        cgroups: options.node_cgroups.clone(),
    }
}

/// What every pod's sync shares: the runtime, the prober, the caches, the back-offs.
fn sync_context<R: CriRuntime + 'static>(
    runtime: &Arc<R>,
    checker: Arc<dyn Checker>,
    options: &AgentOptions,
    cache: Arc<PodCache>,
    probe_updates: Arc<PodQueue<crate::prober::ProbeUpdate>>,
) -> Arc<SyncContext<R>> {
    let clock = Clock::new();
    let node = node_context(options);
    let metrics = Arc::new(Metrics::default());
    let events: Arc<dyn Recorder> = options
        .events
        .clone()
        .unwrap_or_else(|| Arc::new(LogRecorder));
    let prober = Arc::new(Prober::new(
        runtime.clone(),
        checker.clone(),
        probe_updates,
        clock,
        &node.host_ip,
        events.clone(),
        metrics.probes.clone(),
    ));
    Arc::new(SyncContext {
        runtime: runtime.clone(),
        runtime_name: std::sync::OnceLock::new(),
        ops: Arc::new(ContainerOps {
            runtime: runtime.clone(),
            checker,
            node: node.clone(),
        }),
        node,
        clock,
        cache,
        statuses: Arc::new(StatusManager::new()),
        prober,
        crash_backoff: Mutex::new(Backoff::default()),
        pull_backoff: Mutex::new(Backoff::default()),
        mount_backoff: Mutex::new(Backoff::new(MOUNT_RETRY, MOUNT_RETRY_MAX)),
        metrics,
        first_relist: tokio::sync::watch::Sender::new(false),
        events,
        sources_ready: std::sync::atomic::AtomicBool::new(false),
        volume_source: options.volumes.clone(),
        services: options.services.clone(),
        volumes_ready: Mutex::default(),
        said: Mutex::default(),
        pacer: crate::sync::pacing::Pacer::new(options.start_parallelism),
        devices: options.devices.clone(),
        allocations: crate::resize::Allocations::load(
            Some(&options.root_dir),
            &options.node.allocatable(),
        ),
    })
}
