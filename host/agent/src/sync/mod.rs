//! What a pod worker does: syncPod (compute the actions, apply them through the CRI),
//! terminate (preStop hooks, stop the containers within the grace period, stop the
//! sandbox) and cleanup (remove the containers, the sandboxes and the pod's
//! directories). After changing anything, the worker reads the pod back from the
//! runtime at once and updates the cache and the status — status does not wait for
//! the next relist.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use wasmlet_cri::proto;
use wasmlet_cri::{CriError, CriRuntime};

use crate::backoff::Backoff;
use crate::cache::PodCache;
use crate::criconfig::{self, NodeContext};
use crate::events::{Event, Recorder};
use crate::metrics::Metrics;
use crate::pleg;
use crate::prober::Prober;
use crate::statuses::{self, StatusManager};
use crate::time::Clock;
use wasmlet_core::actions;
use wasmlet_core::lifecycle::Outcome as WorkOutcome;
use wasmlet_core::pod::{self, PodKey};
use wasmlet_core::runtime::{PodRuntime, Sandbox};
use wasmlet_core::status::Waiting;

/// How soon a sync that failed on the runtime is tried again.
pub const ERROR_RETRY: Duration = Duration::from_secs(10);
/// How soon a volume that could not be set up is tried again first (the kubelet's
/// volume operations: 500 ms, doubling up to 2 min 2 s): a token refused for a moment —
/// the API server's node authorizer not yet knowing the pod after a restart — does not
/// hold the pod for long.
pub const MOUNT_RETRY: Duration = Duration::from_millis(500);
/// The longest wait between volume set-up retries.
pub const MOUNT_RETRY_MAX: Duration = Duration::from_secs(122);
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
    /// Volume set-up retries, by UID: [`MOUNT_RETRY`] doubling to [`MOUNT_RETRY_MAX`].
    pub mount_backoff: Mutex<Backoff>,
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
    /// Pods whose volumes are mounted, and when their service account tokens were last
    /// requested.
    pub volumes_ready: Mutex<std::collections::HashMap<String, Instant>>,
    /// Turns for the runtime's heavy calls.
    pub pacer: pacing::Pacer,
    /// What keeps each pod from starting as last logged (its sandbox, its volumes), by
    /// UID: a cause is logged once, not at every retry.
    pub said: Mutex<std::collections::HashMap<String, String>>,
    /// In-place resize: each pod's allocation and what its containers were given.
    pub allocations: crate::resize::Allocations,
    /// The device plugins' manager, if the node has one.
    pub devices: Option<Arc<wasmlet_devices::Manager>>,
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

/// Whether `cause` differs from what was said last for `uid`; remembers it.
fn first_time(
    said: &mut std::collections::HashMap<String, String>,
    uid: &str,
    cause: &str,
) -> bool {
    if said.get(uid).is_some_and(|c| c == cause) {
        return false;
    }
    said.insert(uid.to_owned(), cause.to_owned());
    true
}

/// Whether two reasons a container waits are the same cause: the same reason, and for
/// anything but a back-off (whose message counts its delay up) the same message.
fn same_cause(a: &Waiting, b: &Waiting) -> bool {
    a.reason == b.reason
        && (a.message == b.message
            || matches!(a.reason.as_str(), "CrashLoopBackOff" | "ImagePullBackOff"))
}

/// The containers to start, in the kubelet's order, each with whether it is an init
/// container: ephemeral containers, init containers (the next one to run, sidecars to
/// start again), app containers. (A fresh sandbox has no containers: the old ones, in other sandboxes,
/// only count for restart counts and back-off.)
fn starting<'a>(
    pod: &'a k8s::Pod,
    actions: &actions::PodActions,
    ephemeral: &'a [k8s::Container],
) -> Vec<(&'a k8s::Container, bool)> {
    let inits = actions
        .init
        .iter()
        .map(|&i| (&pod::init_containers(pod)[i], true));
    let apps = actions
        .start
        .iter()
        .map(|&i| (&pod::containers(pod)[i], false));
    actions
        .ephemeral
        .iter()
        .map(|&i| (&ephemeral[i], false))
        .chain(inits)
        .chain(apps)
        .collect()
}

fn min_instant(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl<R: CriRuntime + 'static> SyncContext<R> {
    /// The kubelet's mount step, on every sync of a pod that is not finished: volumes are
    /// set up before anything starts — a pod waits (ContainerCreating, a FailedMount
    /// event) until they are — and brought up to date afterwards (changed ConfigMaps,
    /// Secrets, labels and annotations; a failed update leaves the files as they were).
    /// Projected tokens are requested at the first mount after the agent starts and again
    /// at 80 % of their life. `false`: the pod cannot start yet.
    async fn mount_volumes(&self, pod: &k8s::Pod) -> bool {
        if !crate::volumes::needed(pod) {
            return true;
        }
        let key = PodKey::of(pod);
        let source = self.volume_source.as_deref();
        if let Some(source) = source {
            source.register_pod(&key.uid, crate::volumes::references(pod));
        }
        let mounted = Self::lock(&self.volumes_ready).get(&key.uid).copied();
        let refresh = mounted.is_none_or(|at| {
            crate::volumes::refresh_after(pod).is_some_and(|every| at.elapsed() >= every)
        });
        match crate::volumes::prepare(pod, &self.node, source, refresh).await {
            Ok(written) => {
                if refresh {
                    Self::lock(&self.volumes_ready).insert(key.uid.clone(), Instant::now());
                    Self::lock(&self.said).remove(&key.uid);
                    Self::lock(&self.mount_backoff).reset(&key.uid);
                }
                if mounted.is_some() && !written.is_empty() {
                    info!(pod = %key, volumes = ?written, "volumes updated");
                }
                true
            }
            Err(e) => {
                let message = e.to_string();
                if self.say_once(&key.uid, &message) {
                    warn!(pod = %key, "{message}");
                } else {
                    debug!(pod = %key, "{message}");
                }
                self.events
                    .record(Event::warning(pod, None, "FailedMount", message));
                mounted.is_some()
            }
        }
    }

    /// How soon pod `uid`'s volumes are tried again after they failed (again).
    fn mount_retry(&self, uid: &str) -> Duration {
        let mut backoff = Self::lock(&self.mount_backoff);
        backoff.next(uid, Instant::now());
        backoff.delay(uid).unwrap_or(ERROR_RETRY)
    }

    /// Whether `cause` is new for pod `uid` (and to be logged), remembering it.
    fn say_once(&self, uid: &str, cause: &str) -> bool {
        first_time(&mut Self::lock(&self.said), uid, cause)
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
                self.runtime
                    .container_status(id, false)
                    .await
                    .map(|r| r.status.map(|s| crate::termination::observed(&s, sandbox))),
            ));
        }
        // Sandboxes read during the work already, then the others.
        let mut sandboxes: Vec<(String, wasmlet_cri::runtime::Result<Option<Sandbox>>)> = touched
            .read
            .into_iter()
            .map(|s| (s.id.clone(), Ok(Some(s))))
            .collect();
        for id in touched.sandboxes {
            let read = self.runtime.pod_sandbox_status(&id, false).await.map(|r| {
                r.status
                    .as_ref()
                    .map(wasmlet_core::runtime::sandbox_from_status)
            });
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

    /// syncPod, on the pod as its allocation runs it.
    pub async fn sync_pod(&self, pod: &Arc<k8s::Pod>) -> SyncResult {
        let pod = &self.allocated(pod);
        let key = PodKey::of(pod);
        let rt = self.cached(&key.uid).await;
        let mut touched = Touched::default();
        let grace = pod::grace_seconds(pod);
        self.check_deadline(pod);
        // Ended by the node (activeDeadlineSeconds, or eviction for node pressure):
        // stopped with the eviction's grace, else the pod's own.
        if let Some(eviction_grace) = self.statuses.eviction(&key.uid) {
            return SyncResult::new(WorkOutcome::Evicted {
                grace: eviction_grace
                    .unwrap_or_else(|| Duration::from_secs(u64::try_from(grace).unwrap_or(0))),
            });
        }
        let mut actions = actions::compute(pod, &rt, &|id| self.prober.probed(id));
        if actions.pod_finished() {
            return self.finish(pod, &rt, &actions, grace).await;
        }
        let resize = self.resize_plan(pod, &rt, &mut actions);
        if actions.kill_pod && !rt.sandboxes.is_empty() {
            info!(pod = %key, "sandbox changed: stopping the pod before creating a new sandbox");
            let stopped = self.stop_everything(pod, &rt, grace, &mut touched).await;
            if let Err(e) = stopped {
                warn!(pod = %key, "stopping the old sandbox failed: {e}");
                self.read_back(pod, touched).await;
                return SyncResult::retry(WorkOutcome::Synced, STOP_RETRY);
            }
        }
        if !self.mount_volumes(pod).await {
            self.read_back(pod, touched).await;
            return SyncResult::retry(WorkOutcome::Synced, self.mount_retry(&key.uid));
        }
        let sandbox_config = criconfig::sandbox_config(pod, actions.attempt, &self.node);
        let ephemeral = pod::ephemeral_containers(pod);
        let starting = starting(pod, &actions, &ephemeral);
        // What the containers need next is asked for while their sandbox is made; a
        // sandbox that cannot be made ends the sync at once, whatever is still asked.
        let sandbox = async {
            let made = self.ensure_sandbox(pod, &actions, &rt, &sandbox_config, &mut touched);
            made.await.ok_or(())
        };
        let ahead = async { Ok(self.ahead(pod, &starting, actions.create_sandbox).await) };
        let Ok(((sandbox_id, pod_ip), ahead)) = tokio::try_join!(sandbox, ahead) else {
            self.read_back(pod, touched).await;
            return SyncResult::retry(WorkOutcome::Synced, ERROR_RETRY);
        };
        for k in &actions.kill {
            self.kill_container(pod, &rt, k, grace, &mut touched).await;
        }
        self.resize(pod, &resize).await;
        let sandbox = (sandbox_id.as_str(), &sandbox_config);
        let (results, sidecar_started) = self
            .start_all(pod, &rt, starting, sandbox, &pod_ip, &ahead)
            .await;
        let mut requeue = self.record_starts(&key, results, &sandbox_id, &mut touched);
        self.read_back(pod, touched).await;
        if let Some(at) = self.deadline_sync(&key.uid) {
            requeue = min_instant(requeue, at);
        }
        if sidecar_started {
            // A sidecar started lets the next init container start: synced again at
            // once rather than at the next relist.
            requeue = min_instant(requeue, Instant::now());
        }
        SyncResult {
            outcome: WorkOutcome::Synced,
            requeue,
        }
    }

    /// A pod with nothing left to run: the containers the actions kill are stopped;
    /// sidecars still running are stopped as the kubelet stops a pod, with its grace
    /// period, after the app containers, in reverse order.
    async fn finish(
        &self,
        pod: &Arc<k8s::Pod>,
        rt: &PodRuntime,
        actions: &actions::PodActions,
        grace: i64,
    ) -> SyncResult {
        let mut touched = Touched::default();
        for k in &actions.kill {
            self.kill_container(pod, rt, k, grace, &mut touched).await;
        }
        self.read_back(pod, touched).await;
        let grace = if rt.running().next().is_some() {
            Duration::from_secs(u64::try_from(grace).unwrap_or(0))
        } else {
            Duration::ZERO
        };
        SyncResult::new(WorkOutcome::Finished { grace })
    }

    /// Starts `starting` in order, each with its result; whether a sidecar started. An
    /// init container that did not start holds what comes after it; a sidecar that did
    /// not start is tried again at the next sync, and the others go on.
    async fn start_all(
        &self,
        pod: &k8s::Pod,
        rt: &PodRuntime,
        starting: Vec<(&k8s::Container, bool)>,
        sandbox: (&str, &proto::PodSandboxConfig),
        pod_ip: &str,
        ahead: &ahead::Ahead,
    ) -> (Vec<(String, Result<String, NotStarted>)>, bool) {
        let mut results = Vec::new();
        let mut sidecar_started = false;
        for (c, init) in starting {
            let r = self
                .start_container(pod, c, init, rt, sandbox, pod_ip, ahead)
                .await;
            let held = init && r.is_err() && !pod::is_restartable(c);
            sidecar_started |= init && r.is_ok() && pod::is_restartable(c);
            results.push((c.name.clone(), r));
            if held {
                break;
            }
        }
        (results, sidecar_started)
    }

    /// When the pod must sync again for its activeDeadlineSeconds to end it (known once
    /// its start time is).
    fn deadline_sync(&self, uid: &str) -> Option<Instant> {
        let deadline = self.statuses.deadline(uid)?;
        Some(
            self.clock
                .instant_of(deadline.saturating_mul(1_000_000_000)),
        )
    }

    /// The sandbox the containers start in, and the pod's IP: a new one made when the
    /// actions say so (its failure recorded as the kubelet's FailedCreatePodSandBox and
    /// `None`), else the running one's.
    async fn ensure_sandbox(
        &self,
        pod: &Arc<k8s::Pod>,
        actions: &actions::PodActions,
        rt: &PodRuntime,
        sandbox_config: &proto::PodSandboxConfig,
        touched: &mut Touched,
    ) -> Option<(String, String)> {
        if !actions.create_sandbox {
            let ip = rt.sandbox().and_then(|s| s.ips.first().cloned());
            return Some((
                actions.sandbox_id.clone().unwrap_or_default(),
                ip.unwrap_or_default(),
            ));
        }
        let key = PodKey::of(pod);
        match self.create_sandbox(pod, sandbox_config).await {
            Ok((id, ip, status)) => {
                Self::lock(&self.said).remove(&key.uid);
                match status {
                    Some(sandbox) => touched.read.push(sandbox),
                    None => touched.sandboxes.push(id.clone()),
                }
                Some((id, ip))
            }
            Err(e) => {
                if self.say_once(&key.uid, &e) {
                    warn!(pod = %key, "Failed to create pod sandbox: {e}");
                } else {
                    debug!(pod = %key, "Failed to create pod sandbox: {e}");
                }
                self.events.record(Event::warning(
                    pod,
                    None,
                    "FailedCreatePodSandBox",
                    format!("Failed to create pod sandbox: {e}"),
                ));
                None
            }
        }
    }

    /// Takes what each container start gave into the status (why it waits, or that it
    /// no longer does) and what to read back; a new cause of waiting is logged once.
    /// Returns when the pod wants its next sync.
    fn record_starts(
        &self,
        key: &PodKey,
        results: Vec<(String, Result<String, NotStarted>)>,
        sandbox_id: &str,
        touched: &mut Touched,
    ) -> Option<Instant> {
        let mut requeue = None;
        for (name, r) in results {
            match r {
                Ok(id) => {
                    touched.containers.push((id, sandbox_id.to_owned()));
                    self.statuses.set_waiting(&key.uid, &name, None);
                }
                Err(n) => {
                    if let Some(id) = n.created {
                        touched.containers.push((id, sandbox_id.to_owned()));
                    }
                    let before =
                        self.statuses
                            .set_waiting(&key.uid, &name, Some(n.waiting.clone()));
                    if !before.is_some_and(|b| same_cause(&b, &n.waiting)) {
                        // Said in the agent's own log once per cause: events cannot
                        // reach an API server that is down (or one of these pods).
                        warn!(
                            pod = %key,
                            container = %name,
                            reason = %n.waiting.reason,
                            "container not started: {}",
                            n.waiting.message
                        );
                    }
                    requeue = min_instant(requeue, n.retry);
                }
            }
        }
        requeue
    }

    /// Marks the pod Failed with the kubelet's reason and message, and says so in an
    /// event once, when it has been active longer than its `activeDeadlineSeconds`
    /// (counted from its start time, also after the deadline was lowered).
    fn check_deadline(&self, pod: &k8s::Pod) {
        let uid = pod::uid(pod);
        let Some(deadline) = self.statuses.deadline(uid) else {
            return;
        };
        if self.clock.unix_nanos() < deadline.saturating_mul(1_000_000_000) {
            return;
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
    }
}

mod ahead;
pub mod pacing;
mod resize;
mod start;
mod stop;

pub use stop::ContainerOps;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_level_cause_is_said_once_until_it_changes() {
        let mut said = std::collections::HashMap::new();
        assert!(first_time(&mut said, "a", "no sandbox: refused"));
        assert!(!first_time(&mut said, "a", "no sandbox: refused"));
        assert!(first_time(&mut said, "b", "no sandbox: refused"), "per pod");
        assert!(first_time(&mut said, "a", "configmap \"x\" not found"));
        assert!(
            first_time(&mut said, "a", "no sandbox: refused"),
            "back again"
        );
    }

    #[test]
    fn a_cause_is_its_reason_and_message_but_a_back_off_counting_up_is_one_cause() {
        let config = waiting("CreateContainerConfigError", "configmap \"a\" not found");
        assert!(same_cause(&config, &config.clone()));
        assert!(!same_cause(
            &config,
            &waiting("CreateContainerConfigError", "secret \"b\" not found")
        ));
        assert!(!same_cause(
            &config,
            &waiting("CreateContainerError", "configmap \"a\" not found")
        ));
        assert!(same_cause(
            &waiting(
                "CrashLoopBackOff",
                "back-off 10s restarting failed container=c"
            ),
            &waiting(
                "CrashLoopBackOff",
                "back-off 20s restarting failed container=c"
            )
        ));
    }
}
