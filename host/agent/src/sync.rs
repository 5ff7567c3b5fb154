//! What a pod worker does: syncPod (compute the actions, apply them through the CRI),
//! terminate (preStop hooks, stop the containers within the grace period, stop the
//! sandbox) and cleanup (remove the containers, the sandboxes and the pod's
//! directories). After changing anything, the worker reads the pod back from the
//! runtime at once and updates the cache and the status — status does not wait for
//! the next relist.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use wasmlet_cri::proto::{self, ImageSpec};
use wasmlet_cri::{CriError, CriRuntime};
use wasmlet_plugin_host::convert;
use wasmlet_plugin_host::probe::{ContainerExec, Outcome, ProbeKind};

use crate::actions::{self, Kill};
use crate::backoff::Backoff;
use crate::cache::PodCache;
use crate::criconfig::{self, NodeContext};
use crate::events::{Event, Recorder};
use crate::lifecycle::Outcome as WorkOutcome;
use crate::metrics::Metrics;
use crate::pleg;
use crate::pod::{self, PodKey};
use crate::prober::{Checker, CriExec, Prober};
use crate::runtime::{PodRuntime, Sandbox, State};
use crate::status::Waiting;
use crate::statuses::{self, StatusManager};
use crate::time::Clock;

/// How soon a sync that failed on the runtime is tried again.
pub const ERROR_RETRY: Duration = Duration::from_secs(10);
/// How soon a kill or cleanup that failed is tried again.
pub const STOP_RETRY: Duration = Duration::from_secs(1);
/// The longest a postStart hook may take.
pub const POST_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How a piece of work ended and when the pod wants its next sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncResult {
    /// For the worker's state machine.
    pub outcome: WorkOutcome,
    /// When to sync again (back-off expiry, a retry), if before the periodic resync.
    pub requeue: Option<Instant>,
}

impl SyncResult {
    fn new(outcome: WorkOutcome) -> Self {
        SyncResult {
            outcome,
            requeue: None,
        }
    }

    fn retry(outcome: WorkOutcome, after: Duration) -> Self {
        SyncResult {
            outcome,
            requeue: Some(Instant::now() + after),
        }
    }
}

/// The kubelet's reason for a pod stopped at its `activeDeadlineSeconds`.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// The kubelet's message for it.
pub const DEADLINE_EXCEEDED_MESSAGE: &str =
    "Pod was active on the node longer than the specified deadline";

/// Everything a pod worker needs. Shared by all workers.
pub struct SyncContext<R> {
    /// The runtime.
    pub runtime: Arc<R>,
    /// The runtime's name (`containerd`), the prefix of container IDs in status; set
    /// once the runtime answers Version.
    pub runtime_name: std::sync::OnceLock<String>,
    /// Node facts for CRI configurations.
    pub node: NodeContext,
    /// The agent's clock.
    pub clock: Clock,
    /// The pod cache.
    pub cache: Arc<PodCache>,
    /// Statuses.
    pub statuses: Arc<StatusManager>,
    /// Probes.
    pub prober: Arc<Prober<R>>,
    /// Hooks and container stops.
    pub ops: Arc<ContainerOps<R>>,
    /// CrashLoopBackOff, by `uid/container`.
    pub crash_backoff: Mutex<Backoff>,
    /// ImagePullBackOff, by `uid/image`.
    pub pull_backoff: Mutex<Backoff>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// True once PLEG has relisted: until then the cache does not know what runs.
    pub first_relist: tokio::sync::watch::Sender<bool>,
    /// Where events go.
    pub events: Arc<dyn Recorder>,
    /// True once every pod source has reported at least once.
    pub sources_ready: std::sync::atomic::AtomicBool,
    /// Where configMap, secret and token volumes come from (the API server).
    pub volume_source: Option<Arc<dyn crate::volumes::VolumeSource>>,
    /// The Services whose variables containers get (the API server's, watched).
    pub services: Option<Arc<dyn criconfig::services::ServiceSource>>,
    /// Pods whose volumes are written, and when.
    pub volumes_ready: Mutex<std::collections::HashMap<String, Instant>>,
}

/// Why a container was not started this time, and when to try again.
struct NotStarted {
    waiting: Waiting,
    retry: Instant,
    /// A container that was created before the failure.
    created: Option<String>,
}

/// What a piece of work changed in the runtime: read back afterwards.
#[derive(Debug, Default)]
struct Touched {
    /// Containers, with their sandbox.
    containers: Vec<(String, String)>,
    /// Sandboxes.
    sandboxes: Vec<String>,
    /// Sandboxes read already (a new sandbox's status, read for its IP).
    read: Vec<Sandbox>,
}

fn waiting(reason: &str, message: impl Into<String>) -> Waiting {
    Waiting {
        reason: reason.to_owned(),
        message: message.into(),
    }
}

fn min_instant(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl<R: CriRuntime + 'static> SyncContext<R> {
    /// Reads the ConfigMaps and Secrets the environment of the containers `actions`
    /// starts refers to (none without a volume source: those containers then wait with
    /// CreateContainerConfigError, naming what is missing), and the Services whose
    /// variables they get.
    async fn env_data(&self, pod: &k8s::Pod, actions: &actions::PodActions) -> criconfig::EnvData {
        let mut data = criconfig::EnvData::default();
        if actions.next_init.is_none() && actions.start.is_empty() {
            return data;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        if let Some(services) = &self.services {
            match services.services(namespace).await {
                Ok(all) => {
                    let links = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.enable_service_links)
                        .unwrap_or(true);
                    let chosen = criconfig::services::for_pod(&all, namespace, links);
                    data.services = criconfig::services::env(&chosen);
                }
                Err(e) => data.services_error = Some(e),
            }
        }
        let Some(source) = &self.volume_source else {
            return data;
        };
        let containers = actions
            .next_init
            .map(|i| &pod::init_containers(pod)[i])
            .into_iter()
            .chain(actions.start.iter().map(|&i| &pod::containers(pod)[i]));
        let mut wanted: Vec<(bool, String)> =
            containers.flat_map(criconfig::EnvData::wanted).collect();
        wanted.sort();
        wanted.dedup();
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        for (secret, name) in wanted {
            let got = if secret {
                source.secret(namespace, &name).await
            } else {
                source.config_map(namespace, &name).await
            };
            let text = match got {
                Ok(d) => d.map(|d| {
                    d.into_iter()
                        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                        .collect()
                }),
                Err(e) => {
                    warn!(pod = %PodKey::of(pod), "{e}");
                    None
                }
            };
            if secret {
                data.secrets.insert(name, text);
            } else {
                data.config_maps.insert(name, text);
            }
        }
        data
    }

    /// When pod `uid`'s volumes were last written.
    fn volumes_written(&self, uid: &str) -> Option<Instant> {
        Self::lock(&self.volumes_ready).get(uid).copied()
    }

    /// Locks `m`, whether or not a panic poisoned it.
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks PLEG's first relist done: syncs, which start from the cache, may begin.
    pub fn relisted(&self) {
        self.first_relist.send_replace(true);
    }

    /// The runtime's name, once known.
    pub fn runtime_name(&self) -> &str {
        self.runtime_name.get().map_or("unknown", String::as_str)
    }

    /// Reads pod `uid` back from the runtime into the cache.
    pub async fn refresh(&self, uid: &str) -> Result<Arc<PodRuntime>, CriError> {
        let observed = Instant::now();
        let previous = self.cache.get(uid);
        let rt = pleg::inspect(
            &*self.runtime,
            &self.node.node_name,
            uid,
            previous.as_deref(),
        )
        .await?;
        self.cache.set(rt, observed);
        Ok(self.cache.get(uid).unwrap_or_default())
    }

    /// Recomputes the pod's status from the cache.
    pub fn update_status(&self, uid: &str) -> Option<k8s::PodStatus> {
        let rt = self.cache.get(uid).unwrap_or_default();
        let now = self.clock.now_rfc3339();
        let probes = |id: &str| self.prober.view(id);
        let (status, started) = self.statuses.update(
            uid,
            &rt,
            &statuses::Context {
                runtime_name: self.runtime_name(),
                host_ip: &self.node.host_ip,
                probes: &probes,
                now: &now,
            },
        )?;
        if let Some(took) = started {
            self.metrics.pod_start_duration.observe(took.as_secs_f64());
        }
        Some(status)
    }

    async fn refresh_and_report(&self, pod: &Arc<k8s::Pod>) {
        let uid = pod::uid(pod);
        match self.refresh(uid).await {
            Ok(rt) => self.prober.sync_pod(pod, &rt),
            Err(e) => debug!(pod = %PodKey::of(pod), "reading the pod back failed: {e}"),
        }
        self.update_status(uid);
    }

    /// What the runtime has for `uid`, from the cache (PLEG's relists and the workers'
    /// read-backs), once PLEG has relisted at least once.
    async fn cached(&self, uid: &str) -> Arc<PodRuntime> {
        let mut relisted = self.first_relist.subscribe();
        let _ = relisted.wait_for(|done| *done).await;
        self.cache.get(uid).unwrap_or_else(|| {
            Arc::new(PodRuntime {
                uid: uid.to_owned(),
                ..Default::default()
            })
        })
    }

    /// Reads back what a piece of work changed (ContainerStatus, PodSandboxStatus of
    /// those objects only, no lists) into the cache, then recomputes the status.
    async fn read_back(&self, pod: &Arc<k8s::Pod>, touched: Touched) {
        let uid = pod::uid(pod);
        let observed = Instant::now();
        let mut containers = Vec::new();
        for (id, sandbox) in &touched.containers {
            containers.push((
                id,
                self.runtime.container_status(id, false).await.map(|r| {
                    r.status
                        .map(|s| crate::runtime::container_from_status(&s, sandbox))
                }),
            ));
        }
        // Sandboxes read during the work already, then the others.
        let mut sandboxes: Vec<(String, wasmlet_cri::runtime::Result<Option<Sandbox>>)> = touched
            .read
            .into_iter()
            .map(|s| (s.id.clone(), Ok(Some(s))))
            .collect();
        for id in touched.sandboxes {
            let read = self
                .runtime
                .pod_sandbox_status(&id, false)
                .await
                .map(|r| r.status.as_ref().map(crate::runtime::sandbox_from_status));
            sandboxes.push((id, read));
        }
        let mut rt = self
            .cache
            .get(uid)
            .map(|r| (*r).clone())
            .unwrap_or_else(|| PodRuntime {
                uid: uid.to_owned(),
                ..Default::default()
            });
        if rt.name.is_empty() {
            rt.name = pod.metadata.name.clone().unwrap_or_default();
            rt.namespace = pod.metadata.namespace.clone().unwrap_or_default();
        }
        for (id, read) in containers {
            match read {
                Ok(Some(info)) => match rt.containers.iter_mut().find(|c| &c.id == id) {
                    Some(c) => *c = info,
                    None => rt.containers.push(info),
                },
                Err(e) if e.kind() == wasmlet_cri::ErrorKind::NotFound => {
                    rt.containers.retain(|c| &c.id != id);
                }
                _ => {}
            }
        }
        for (id, read) in sandboxes {
            match read {
                Ok(Some(sandbox)) => match rt.sandboxes.iter_mut().find(|s| s.id == id) {
                    Some(s) => *s = sandbox,
                    None => rt.sandboxes.push(sandbox),
                },
                Err(e) if e.kind() == wasmlet_cri::ErrorKind::NotFound => {
                    rt.sandboxes.retain(|s| s.id != id);
                }
                _ => {}
            }
        }
        rt.sort();
        self.cache.set(rt, observed);
        if let Some(rt) = self.cache.get(uid) {
            self.prober.sync_pod(pod, &rt);
        }
        self.update_status(uid);
    }

    /// syncPod.
    pub async fn sync_pod(&self, pod: &Arc<k8s::Pod>) -> SyncResult {
        let key = PodKey::of(pod);
        let rt = self.cached(&key.uid).await;
        let mut touched = Touched::default();
        let grace = pod::grace_seconds(pod);
        if self.past_deadline(pod) {
            return SyncResult::new(WorkOutcome::Evicted {
                grace: Duration::from_secs(u64::try_from(grace).unwrap_or(0)),
            });
        }
        let actions = actions::compute(pod, &rt, &|id| self.prober.failure(id));
        if actions.pod_finished() {
            for k in &actions.kill {
                self.kill_container(pod, &rt, k, grace, &mut touched).await;
            }
            self.read_back(pod, touched).await;
            return SyncResult::new(WorkOutcome::Finished);
        }
        let mut requeue = None;
        if actions.kill_pod && !rt.sandboxes.is_empty() {
            info!(pod = %key, "sandbox changed: stopping the pod before creating a new sandbox");
            let stopped = self.stop_everything(pod, &rt, grace, &mut touched).await;
            if let Err(e) = stopped {
                warn!(pod = %key, "stopping the old sandbox failed: {e}");
                self.read_back(pod, touched).await;
                return SyncResult::retry(WorkOutcome::Synced, STOP_RETRY);
            }
        }
        // The kubelet's mount step: volumes with content are written before anything
        // starts, and a pod waits (ContainerCreating, a FailedMount event) until they are.
        // Projected tokens are written again at 80 % of their life (on a periodic sync).
        let starts = actions.next_init.is_some() || !actions.start.is_empty();
        if crate::volumes::needed(pod) {
            let written = self.volumes_written(&key.uid);
            let refresh = written
                .zip(crate::volumes::refresh_after(pod))
                .is_some_and(|(at, every)| at.elapsed() >= every);
            if (starts && written.is_none()) || refresh {
                match crate::volumes::prepare(pod, &self.node, self.volume_source.as_deref()).await
                {
                    Ok(()) => {
                        Self::lock(&self.volumes_ready).insert(key.uid.clone(), Instant::now());
                    }
                    Err(e) => {
                        warn!(pod = %key, "{e}");
                        self.events
                            .record(Event::warning(pod, None, "FailedMount", e.to_string()));
                        if written.is_none() {
                            self.read_back(pod, touched).await;
                            return SyncResult::retry(WorkOutcome::Synced, ERROR_RETRY);
                        }
                        // A refresh that failed: the files written before stay.
                    }
                }
            }
        }
        let sandbox_config = criconfig::sandbox_config(pod, actions.attempt, &self.node);
        let (sandbox_id, pod_ip) = if actions.create_sandbox {
            match self.create_sandbox(pod, &sandbox_config).await {
                Ok((id, ip, status)) => {
                    match status {
                        Some(sandbox) => touched.read.push(sandbox),
                        None => touched.sandboxes.push(id.clone()),
                    }
                    (id, ip)
                }
                Err(e) => {
                    warn!(pod = %key, "Failed to create pod sandbox: {e}");
                    self.events.record(Event::warning(
                        pod,
                        None,
                        "FailedCreatePodSandBox",
                        format!("Failed to create pod sandbox: {e}"),
                    ));
                    self.read_back(pod, touched).await;
                    return SyncResult::retry(WorkOutcome::Synced, ERROR_RETRY);
                }
            }
        } else {
            let sandbox = rt.sandbox();
            (
                actions.sandbox_id.clone().unwrap_or_default(),
                sandbox
                    .and_then(|s| s.ips.first().cloned())
                    .unwrap_or_default(),
            )
        };
        for k in &actions.kill {
            self.kill_container(pod, &rt, k, grace, &mut touched).await;
        }
        // A fresh sandbox has no containers: the old ones (other sandboxes) only count
        // for restart counts and back-off.
        // ConfigMaps and Secrets the environment of the containers to start refers to.
        let refs = self.env_data(pod, &actions).await;
        let refs = &refs;
        let start = |index: usize, init: bool| {
            let list = if init {
                pod::init_containers(pod)
            } else {
                pod::containers(pod)
            };
            let c = &list[index];
            let sandbox_id = sandbox_id.clone();
            let sandbox_config = sandbox_config.clone();
            let pod_ip = pod_ip.clone();
            let rt = rt.clone();
            async move {
                let r = self
                    .start_container(
                        pod,
                        c,
                        init,
                        &rt,
                        (&sandbox_id, &sandbox_config),
                        &pod_ip,
                        refs,
                    )
                    .await;
                (c.name.clone(), r)
            }
        };
        let mut results = Vec::new();
        if let Some(i) = actions.next_init {
            results.push(start(i, true).await);
        }
        for &i in &actions.start {
            results.push(start(i, false).await);
        }
        for (name, r) in results {
            match r {
                Ok(id) => {
                    touched.containers.push((id, sandbox_id.clone()));
                    self.statuses.set_waiting(&key.uid, &name, None);
                }
                Err(n) => {
                    if let Some(id) = n.created {
                        touched.containers.push((id, sandbox_id.clone()));
                    }
                    self.statuses.set_waiting(&key.uid, &name, Some(n.waiting));
                    requeue = min_instant(requeue, n.retry);
                }
            }
        }
        self.read_back(pod, touched).await;
        // Sync again when activeDeadlineSeconds runs out (the start time is known once
        // the first status is).
        if let Some(deadline) = self.statuses.deadline(&key.uid) {
            let at = self
                .clock
                .instant_of(deadline.saturating_mul(1_000_000_000));
            requeue = min_instant(requeue, at);
        }
        SyncResult {
            outcome: WorkOutcome::Synced,
            requeue,
        }
    }

    /// Whether the pod has been active longer than its `activeDeadlineSeconds` (counted
    /// from its start time, also after the deadline was lowered): if so it is marked
    /// Failed with the kubelet's reason and message, and an event says so once.
    fn past_deadline(&self, pod: &k8s::Pod) -> bool {
        let uid = pod::uid(pod);
        let Some(deadline) = self.statuses.deadline(uid) else {
            return false;
        };
        if self.clock.unix_nanos() < deadline.saturating_mul(1_000_000_000) {
            return false;
        }
        if self
            .statuses
            .evict(uid, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE)
        {
            info!(pod = %PodKey::of(pod), "{DEADLINE_EXCEEDED_MESSAGE}: stopping it");
            self.events.record(Event::normal(
                pod,
                None,
                DEADLINE_EXCEEDED,
                DEADLINE_EXCEEDED_MESSAGE.to_owned(),
            ));
            self.update_status(uid);
        }
        true
    }

    async fn create_sandbox(
        &self,
        pod: &k8s::Pod,
        config: &proto::PodSandboxConfig,
    ) -> Result<(String, String, Option<Sandbox>), String> {
        let _ = std::fs::create_dir_all(&config.log_directory);
        if let Some(cgroups) = &self.node.pod_cgroups {
            // The kubelet's words when its pod cgroup cannot be made.
            cgroups.ensure(pod::uid(pod)).map_err(|e| {
                format!(
                    "failed to ensure that the pod: {} cgroups exist and are correctly applied: {e}",
                    pod::uid(pod)
                )
            })?;
        }
        let handler = pod
            .spec
            .as_ref()
            .and_then(|s| s.runtime_class_name.clone())
            .unwrap_or_default();
        let id = self
            .runtime
            .run_pod_sandbox(config.clone(), &handler)
            .await
            .map_err(|e| e.to_string())?;
        // Read once: its IP for the containers' environment, and the sandbox for the
        // status (the read back after the sync takes it from here).
        let status = self
            .runtime
            .pod_sandbox_status(&id, false)
            .await
            .ok()
            .and_then(|s| s.status);
        let sandbox = status.as_ref().map(crate::runtime::sandbox_from_status);
        let ip = match (&status, pod::host_network(pod)) {
            (Some(st), false) => st
                .network
                .as_ref()
                .map(|n| n.ip.clone())
                .unwrap_or_default(),
            _ => String::new(),
        };
        info!(pod = %PodKey::of(pod), sandbox = %id, ip = %ip, "created pod sandbox");
        Ok((id, ip, sandbox))
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_container(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        init: bool,
        rt: &PodRuntime,
        (sandbox_id, sandbox_config): (&str, &proto::PodSandboxConfig),
        pod_ip: &str,
        refs: &criconfig::EnvData,
    ) -> Result<String, NotStarted> {
        let key = PodKey::of(pod);
        let backoff_key = format!("{}/{}", key.uid, c.name);
        let previous = rt.latest(&c.name);
        let now = Instant::now();
        if let Some(prev) = previous.filter(|p| p.state == State::Exited) {
            let failed_at = self.clock.instant_of(if prev.finished_at > 0 {
                prev.finished_at
            } else {
                prev.created_at
            });
            let mut backoff = Self::lock(&self.crash_backoff);
            backoff.seed(
                &backoff_key,
                failed_at,
                u32::try_from(prev.restart_count).unwrap_or(0),
            );
            if let Some(at) = backoff.retry_at(&backoff_key, failed_at, now) {
                let delay = backoff.delay(&backoff_key).unwrap_or_default();
                self.events.record(Event::warning(
                    pod,
                    Some(&c.name),
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {} in pod {}_{}({})",
                        c.name, key.name, key.namespace, key.uid
                    ),
                ));
                return Err(NotStarted {
                    waiting: waiting(
                        "CrashLoopBackOff",
                        format!(
                            "back-off {}s restarting failed container={} pod={}_{}({})",
                            delay.as_secs(),
                            c.name,
                            key.name,
                            key.namespace,
                            key.uid
                        ),
                    ),
                    retry: at,
                    created: None,
                });
            }
            backoff.next(&backoff_key, failed_at);
        }
        let restart_count = previous.map_or(0, |p| p.restart_count + 1);
        self.ensure_image(pod, c).await?;
        let retry = now + ERROR_RETRY;
        let failed = |reason: &str, message: String| {
            // The kubelet's event for a container it could not create: `Failed`.
            self.events.record(Event::warning(
                pod,
                Some(&c.name),
                "Failed",
                format!("Error: {message}"),
            ));
            NotStarted {
                waiting: waiting(reason, message),
                retry,
                created: None,
            }
        };
        let config =
            criconfig::container_config_with(pod, c, init, restart_count, pod_ip, &self.node, refs)
                .map_err(|e| {
                    if e.is_volume() {
                        self.events.record(Event::warning(
                            pod,
                            None,
                            "FailedMount",
                            format!("MountVolume.SetUp failed: {e}"),
                        ));
                    }
                    failed("CreateContainerConfigError", e.to_string())
                })?;
        let id = self
            .runtime
            .create_container(sandbox_id, config, sandbox_config.clone())
            .await
            .map_err(|e| {
                self.metrics.start_errors.inc();
                failed("CreateContainerError", e.message().to_owned())
            })?;
        self.events.record(Event::normal(
            pod,
            Some(&c.name),
            "Created",
            format!("Created container: {}", c.name),
        ));
        if let Err(e) = self.runtime.start_container(&id).await {
            self.metrics.start_errors.inc();
            self.events.record(Event::warning(
                pod,
                Some(&c.name),
                "Failed",
                format!("Error: {}", e.message()),
            ));
            return Err(NotStarted {
                waiting: waiting("RunContainerError", e.message().to_owned()),
                retry,
                created: Some(id),
            });
        }
        self.metrics.started_containers.inc();
        info!(pod = %key, container = %c.name, id = %id, restart_count, "started container");
        self.events.record(Event::normal(
            pod,
            Some(&c.name),
            "Started",
            format!("Started container {}", c.name),
        ));
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref())
            && let Err(message) = self
                .ops
                .run_hook(pod, c, hook, &id, pod_ip, POST_START_TIMEOUT)
                .await
        {
            warn!(pod = %key, container = %c.name, "PostStartHook failed: {message}");
            self.events.record(Event::warning(
                pod,
                Some(&c.name),
                "FailedPostStartHook",
                message.clone(),
            ));
            let _ = self
                .runtime
                .stop_container(&id, pod::grace_seconds(pod))
                .await;
            return Err(NotStarted {
                waiting: waiting("PostStartHookError", message),
                retry,
                created: Some(id),
            });
        }
        Ok(id)
    }

    async fn ensure_image(&self, pod: &k8s::Pod, c: &k8s::Container) -> Result<(), NotStarted> {
        let image = c.image.clone().unwrap_or_default();
        let policy = c.image_pull_policy.as_deref().unwrap_or("IfNotPresent");
        let spec = ImageSpec {
            image: image.clone(),
            ..Default::default()
        };
        let now = Instant::now();
        let present = match self.runtime.image_status(spec.clone()).await {
            Ok(p) => p.is_some(),
            Err(e) => {
                return Err(NotStarted {
                    waiting: waiting("ErrImageInspect", e.message().to_owned()),
                    retry: now + ERROR_RETRY,
                    created: None,
                });
            }
        };
        let event = |kind: fn(&k8s::Pod, Option<&str>, &str, String) -> Event,
                     reason: &str,
                     message: String| {
            self.events
                .record(kind(pod, Some(c.name.as_str()), reason, message));
        };
        match policy {
            "Never" if !present => {
                event(
                    Event::warning,
                    "ErrImageNeverPull",
                    format!("Container image \"{image}\" is not present with pull policy of Never"),
                );
                return Err(NotStarted {
                    waiting: waiting(
                        "ErrImageNeverPull",
                        format!(
                            "Container image \"{image}\" is not present with pull policy of Never"
                        ),
                    ),
                    retry: now + ERROR_RETRY,
                    created: None,
                });
            }
            "Never" | "IfNotPresent" if present => {
                event(
                    Event::normal,
                    "Pulled",
                    format!("Container image \"{image}\" already present on machine"),
                );
                return Ok(());
            }
            _ => {}
        }
        let key = format!("{}/{image}", pod::uid(pod));
        {
            let backoff = Self::lock(&self.pull_backoff);
            if let Some(at) = backoff.retry_at(&key, now, now) {
                event(
                    Event::normal,
                    "BackOff",
                    format!("Back-off pulling image \"{image}\""),
                );
                return Err(NotStarted {
                    waiting: waiting(
                        "ImagePullBackOff",
                        format!("Back-off pulling image \"{image}\""),
                    ),
                    retry: at,
                    created: None,
                });
            }
        }
        event(
            Event::normal,
            "Pulling",
            format!("Pulling image \"{image}\""),
        );
        let pulling = Instant::now();
        match self.runtime.pull_image(spec, None, None).await {
            Ok(_) => {
                Self::lock(&self.pull_backoff).reset(&key);
                event(
                    Event::normal,
                    "Pulled",
                    format!(
                        "Successfully pulled image \"{image}\" in {:.3}s",
                        pulling.elapsed().as_secs_f64()
                    ),
                );
                Ok(())
            }
            Err(e) => {
                event(
                    Event::warning,
                    "Failed",
                    format!("Failed to pull image \"{image}\": {}", e.message()),
                );
                let mut backoff = Self::lock(&self.pull_backoff);
                backoff.next(&key, now);
                let delay = backoff.delay(&key).unwrap_or(ERROR_RETRY);
                Err(NotStarted {
                    waiting: waiting("ErrImagePull", e.message().to_owned()),
                    retry: now + delay,
                    created: None,
                })
            }
        }
    }

    async fn kill_container(
        &self,
        pod: &k8s::Pod,
        rt: &PodRuntime,
        k: &Kill,
        grace: i64,
        touched: &mut Touched,
    ) {
        let sandbox = rt
            .containers
            .iter()
            .find(|c| c.id == k.id)
            .map(|c| c.sandbox_id.clone())
            .unwrap_or_default();
        touched.containers.push((k.id.clone(), sandbox));
        info!(pod = %PodKey::of(pod), container = %k.name, "Killing container with a grace period: {}", k.message);
        self.events.record(Event::normal(
            pod,
            Some(&k.name),
            "Killing",
            if k.message.is_empty() {
                format!("Stopping container {}", k.name)
            } else {
                k.message.clone()
            },
        ));
        let spec = pod::containers(pod).iter().find(|c| c.name == k.name);
        let ip = rt
            .sandbox()
            .and_then(|s| s.ips.first().cloned())
            .unwrap_or_default();
        if let Err(e) = self.ops.stop_container(pod, spec, &k.id, &ip, grace).await {
            warn!(pod = %PodKey::of(pod), container = %k.name, "StopContainer failed: {e}");
        }
    }

    /// Stops every running container (in parallel, each with its preStop hook) and
    /// every ready sandbox.
    async fn stop_everything(
        &self,
        pod: &Arc<k8s::Pod>,
        rt: &PodRuntime,
        grace: i64,
        touched: &mut Touched,
    ) -> Result<(), CriError> {
        let ip = rt
            .sandbox()
            .and_then(|s| s.ips.first().cloned())
            .unwrap_or_default();
        let mut stops = JoinSet::new();
        for c in rt.running() {
            touched
                .containers
                .push((c.id.clone(), c.sandbox_id.clone()));
            self.events.record(Event::normal(
                pod,
                Some(&c.name),
                "Killing",
                format!("Stopping container {}", c.name),
            ));
            let ops = self.ops.clone();
            let pod = pod.clone();
            let id = c.id.clone();
            let name = c.name.clone();
            let ip = ip.clone();
            stops.spawn(async move {
                let spec = pod::containers(&pod)
                    .iter()
                    .chain(pod::init_containers(&pod))
                    .find(|c| c.name == name);
                ops.stop_container(&pod, spec, &id, &ip, grace).await
            });
        }
        let mut first_error = None;
        while let Some(r) = stops.join_next().await {
            if let Ok(Err(e)) = r {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        for s in rt.sandboxes.iter().filter(|s| s.ready) {
            touched.sandboxes.push(s.id.clone());
            self.runtime.stop_pod_sandbox(&s.id).await?;
        }
        Ok(())
    }

    /// killPod: stops the pod within `grace`.
    pub async fn terminate_pod(&self, pod: &Arc<k8s::Pod>, grace: Duration) -> SyncResult {
        let key = PodKey::of(pod);
        let rt = match self.refresh(&key.uid).await {
            Ok(rt) => rt,
            Err(e) => {
                warn!(pod = %key, "cannot read the pod from the runtime: {e}");
                return SyncResult::retry(WorkOutcome::StopFailed, STOP_RETRY);
            }
        };
        let grace = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
        let result = self
            .stop_everything(pod, &rt, grace, &mut Touched::default())
            .await;
        self.prober.remove_pod(&key.uid);
        self.refresh_and_report(pod).await;
        match result {
            Ok(()) => {
                info!(pod = %key, "pod stopped");
                SyncResult::new(WorkOutcome::Stopped)
            }
            Err(e) => {
                warn!(pod = %key, "stopping the pod failed: {e}");
                SyncResult::retry(WorkOutcome::StopFailed, STOP_RETRY)
            }
        }
    }

    /// Removes a stopped pod's containers, sandboxes and directories.
    pub async fn cleanup_pod(&self, pod: &Arc<k8s::Pod>) -> SyncResult {
        let key = PodKey::of(pod);
        let observed = Instant::now();
        let result = async {
            let rt = self.refresh(&key.uid).await?;
            for c in &rt.containers {
                self.runtime.remove_container(&c.id).await?;
            }
            for s in &rt.sandboxes {
                self.runtime.stop_pod_sandbox(&s.id).await?;
                self.runtime.remove_pod_sandbox(&s.id).await?;
            }
            Ok::<_, CriError>(())
        }
        .await;
        if let Err(e) = result {
            warn!(pod = %key, "removing the pod failed: {e}");
            return SyncResult::retry(WorkOutcome::CleanupFailed, STOP_RETRY);
        }
        let _ = std::fs::remove_dir_all(criconfig::pod_dir(pod, &self.node));
        let _ = std::fs::remove_dir_all(criconfig::log_directory(pod, &self.node));
        if let Some(cgroups) = &self.node.pod_cgroups {
            for left in cgroups.remove(&key.uid) {
                warn!(pod = %key, cgroup = %left.display(), "pod cgroup still in use; housekeeping retries");
            }
        }
        self.cache.remove(&key.uid, observed);
        Self::lock(&self.volumes_ready).remove(&key.uid);
        Self::lock(&self.crash_backoff).reset_prefix(&format!("{}/", key.uid));
        Self::lock(&self.pull_backoff).reset_prefix(&format!("{}/", key.uid));
        info!(pod = %key, "pod removed from the runtime");
        self.statuses.reclaimed(&key.uid);
        SyncResult::new(WorkOutcome::CleanedUp)
    }

    /// Removes dead containers beyond the newest per container name and sandboxes that
    /// are neither ready nor the newest nor in use, for pods the agent runs.
    pub async fn collect_garbage(&self, rt: &PodRuntime) {
        let mut seen_exited: HashSet<&str> = HashSet::new();
        let mut used_sandboxes: Vec<&str> = Vec::new();
        for c in &rt.containers {
            // Containers come newest first: the first exited one of a name is kept.
            let keep = c.state != State::Exited || seen_exited.insert(&c.name);
            if keep {
                used_sandboxes.push(&c.sandbox_id);
                continue;
            }
            if let Err(e) = self.runtime.remove_container(&c.id).await {
                debug!(container = %c.id, "garbage collection: {e}");
            }
        }
        for (i, s) in rt.sandboxes.iter().enumerate() {
            if i == 0 || s.ready || used_sandboxes.contains(&s.id.as_str()) {
                continue;
            }
            if let Err(e) = self.runtime.remove_pod_sandbox(&s.id).await {
                debug!(sandbox = %s.id, "garbage collection: {e}");
            }
        }
    }
}

/// Hooks and stops of single containers: what both a sync and the parallel stop tasks
/// of a kill need.
pub struct ContainerOps<R> {
    /// The runtime.
    pub runtime: Arc<R>,
    /// Runs hooks (the probe handlers).
    pub checker: Arc<dyn Checker>,
    /// Node facts (its IP, for pods on the node's network).
    pub node: NodeContext,
}

impl<R: CriRuntime + 'static> ContainerOps<R> {
    /// Runs a postStart or preStop hook through the probe handler of its kind (a
    /// `sleep` hook sleeps), bounded by `timeout`.
    pub async fn run_hook(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        hook: &k8s::LifecycleHandler,
        container_id: &str,
        pod_ip: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        if let Some(sleep) = &hook.sleep {
            let secs = u64::try_from(sleep.seconds.max(0)).unwrap_or(0);
            tokio::time::sleep(Duration::from_secs(secs).min(timeout)).await;
            return Ok(());
        }
        let probe = k8s::Probe {
            exec: hook.exec.clone(),
            http_get: hook.http_get.clone(),
            tcp_socket: hook.tcp_socket.clone(),
            timeout_seconds: Some(i32::try_from(timeout.as_secs().max(1)).unwrap_or(i32::MAX)),
            ..Default::default()
        };
        let pod_ip = if pod::host_network(pod) {
            self.node.host_ip.as_str()
        } else {
            pod_ip
        };
        let target = convert::probe_target(
            pod,
            c,
            &probe,
            ProbeKind::Liveness,
            pod_ip,
            &format!("{}.lifecycle", c.name),
        )
        .map_err(|e| e.to_string())?;
        let kind = convert::probe_kind(&target.action);
        let exec: Arc<dyn ContainerExec> =
            Arc::new(CriExec::new(self.runtime.clone(), container_id));
        match tokio::time::timeout(timeout, self.checker.check(kind, &target, Some(exec))).await {
            Ok(Ok(Outcome::Success(_))) => Ok(()),
            Ok(Ok(Outcome::Failure(m) | Outcome::Error(m))) => Err(m),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("did not finish within {timeout:?}")),
        }
    }

    /// Stops one container: its preStop hook first (within the grace period), then
    /// StopContainer with what is left of it.
    pub async fn stop_container(
        &self,
        pod: &k8s::Pod,
        c: Option<&k8s::Container>,
        id: &str,
        pod_ip: &str,
        grace: i64,
    ) -> Result<(), CriError> {
        let started = Instant::now();
        let grace_d = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
        if let Some(c) = c
            && let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
            && !grace_d.is_zero()
            && let Err(m) = self.run_hook(pod, c, hook, id, pod_ip, grace_d).await
        {
            warn!(pod = %PodKey::of(pod), container = %c.name, "PreStopHook failed: {m}");
        }
        let left = grace_d.saturating_sub(started.elapsed());
        // Round up: a grace period that has not quite run out still gets its second.
        let secs =
            i64::try_from(left.as_secs() + u64::from(left.subsec_nanos() > 0)).unwrap_or(i64::MAX);
        self.runtime.stop_container(id, secs).await
    }
}
