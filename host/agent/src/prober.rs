//! Probes: a worker per running container and probe (liveness, readiness, startup)
//! that checks it through the probe-handler plugin for its kind, with the kubelet's
//! semantics — the first check at `initialDelaySeconds` after the container started,
//! then every `periodSeconds`; a result changes after `successThreshold` successes or
//! `failureThreshold` failures in a row; until the startup probe succeeds neither
//! liveness nor readiness is checked; readiness starts out failed, liveness passed.
//!
//! Results are kept by container id (a new instance starts from scratch) and every
//! change is queued for the syncLoop: a liveness or startup failure makes it sync the
//! pod (which kills and restarts the container), a readiness change updates the status.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use wasmlet_cri::CriRuntime;
use wasmlet_plugin_host::convert;
use wasmlet_plugin_host::kinds::ProbeHandlers;
use wasmlet_plugin_host::probe::{Action, ContainerExec, ExecOutput, Outcome, ProbeKind, Target};

use crate::events::{Event, Recorder};
use crate::metrics::ProbeResult;
use crate::queue::PodQueue;
use crate::time::Clock;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use wasmlet_core::actions::{ProbeFailure, Probed};
use wasmlet_core::pod;
use wasmlet_core::runtime::{PodRuntime, State};
use wasmlet_core::status::ProbeView;

/// A check that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// No handler checks the kind.
    #[error(transparent)]
    NoHandler(#[from] wasmlet_plugin_host::NoHandler),
    /// The handler failed (trapped, timed out, refused).
    #[error(transparent)]
    Plugin(#[from] wasmlet_plugin_host::PluginError),
    /// Another checker (a test's fake) failing in its own words.
    #[error("{0}")]
    Other(String),
}

/// Runs one check of a kind (`exec`, `httpGet`, …) — the probe handlers, or a fake.
pub trait Checker: Send + Sync + 'static {
    /// Checks `target`; an `Err` is a check that could not be made (no handler, a
    /// plugin that failed).
    fn check<'a>(
        &'a self,
        kind: &'a str,
        target: &'a Target,
        exec: Option<Arc<dyn ContainerExec>>,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, CheckError>> + Send + 'a>>;
}

impl Checker for ProbeHandlers {
    fn check<'a>(
        &'a self,
        kind: &'a str,
        target: &'a Target,
        exec: Option<Arc<dyn ContainerExec>>,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, CheckError>> + Send + 'a>> {
        Box::pin(async move {
            let handler = self.for_kind(kind)?;
            Ok(handler.check(target, exec).await?)
        })
    }
}

/// ExecSync in one container, for exec probes and hooks.
pub struct CriExec<R> {
    runtime: Arc<R>,
    id: String,
}

impl<R: CriRuntime + 'static> CriExec<R> {
    /// Runs commands in container `id`.
    pub fn new(runtime: Arc<R>, id: &str) -> Self {
        CriExec {
            runtime,
            id: id.to_owned(),
        }
    }
}

impl<R: CriRuntime + 'static> ContainerExec for CriExec<R> {
    fn exec_sync(
        &self,
        command: Vec<String>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<ExecOutput, String>> + Send + '_>> {
        Box::pin(async move {
            let out = self
                .runtime
                .exec_sync(&self.id, command, timeout)
                .await
                .map_err(|e| e.to_string())?;
            Ok(ExecOutput {
                exit_code: out.exit_code,
                stdout: out.stdout,
                stderr: out.stderr,
            })
        })
    }
}

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// livenessProbe
    Liveness,
    /// readinessProbe
    Readiness,
    /// startupProbe
    Startup,
}

impl Kind {
    fn field(self) -> &'static str {
        match self {
            Kind::Liveness => "livenessProbe",
            Kind::Readiness => "readinessProbe",
            Kind::Startup => "startupProbe",
        }
    }

    /// The probe's name in events (`Liveness`).
    fn title(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }

    fn wit(self) -> ProbeKind {
        match self {
            Kind::Liveness => ProbeKind::Liveness,
            Kind::Readiness => ProbeKind::Readiness,
            Kind::Startup => ProbeKind::Startup,
        }
    }

    fn of(self, c: &k8s::Container) -> Option<&k8s::Probe> {
        match self {
            Kind::Liveness => c.liveness_probe.as_ref(),
            Kind::Readiness => c.readiness_probe.as_ref(),
            Kind::Startup => c.startup_probe.as_ref(),
        }
    }
}

/// A probe result that changed, for the syncLoop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeUpdate {
    /// The container's runtime id.
    pub container_id: String,
    /// Its name.
    pub container: String,
    /// Which probe.
    pub kind: Kind,
    /// Whether it now passes.
    pub ok: bool,
    /// The handler's message.
    pub message: String,
}

#[derive(Debug, Clone, Copy, Default)]
struct Results {
    ready: Option<bool>,
    started: Option<bool>,
    live: Option<bool>,
    startup_failed: bool,
}

type ResultMap = Arc<RwLock<HashMap<String, Results>>>;

/// A task aborted when dropped.
struct Worker(JoinHandle<()>);

impl Drop for Worker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A pod's probe workers, by container id and probe.
type ProbeWorkers = HashMap<(String, Kind), Worker>;

/// The probe manager.
pub struct Prober<R> {
    runtime: Arc<R>,
    checker: Arc<dyn Checker>,
    results: ResultMap,
    workers: Mutex<HashMap<String, ProbeWorkers>>,
    updates: Arc<PodQueue<ProbeUpdate>>,
    clock: Clock,
    host_ip: String,
    events: Arc<dyn Recorder>,
    counts: Family<ProbeResult, Counter>,
}

impl<R: CriRuntime + 'static> Prober<R> {
    /// A prober checking through `checker`, reporting changes to `updates`, each failed
    /// check as an `Unhealthy` event to `events`, and every check to `counts`.
    pub fn new(
        runtime: Arc<R>,
        checker: Arc<dyn Checker>,
        updates: Arc<PodQueue<ProbeUpdate>>,
        clock: Clock,
        host_ip: &str,
        events: Arc<dyn Recorder>,
        counts: Family<ProbeResult, Counter>,
    ) -> Self {
        Prober {
            runtime,
            checker,
            results: Arc::default(),
            workers: Mutex::default(),
            updates,
            clock,
            host_ip: host_ip.to_owned(),
            events,
            counts,
        }
    }

    /// Probe results of container `id`, for the status.
    pub fn view(&self, id: &str) -> ProbeView {
        let r = self
            .results
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .copied()
            .unwrap_or_default();
        ProbeView {
            ready: r.ready,
            started: r.started,
        }
    }

    /// What the actions need of container `id`: which probe failed, whether its startup
    /// probe passed.
    pub fn probed(&self, id: &str) -> Probed {
        Probed {
            failure: self.failure(id),
            started: self.view(id).started == Some(true),
        }
    }

    /// Which probe failed for container `id`, if one did.
    pub fn failure(&self, id: &str) -> Option<ProbeFailure> {
        let r = self
            .results
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .copied()?;
        if r.startup_failed {
            Some(ProbeFailure::Startup)
        } else if r.live == Some(false) {
            Some(ProbeFailure::Liveness)
        } else {
            None
        }
    }

    /// Starts workers for the running containers of `pod` (app containers and sidecars)
    /// that have probes and stops those whose container no longer runs.
    pub fn sync_pod(&self, pod: &Arc<k8s::Pod>, rt: &PodRuntime) {
        let uid = pod::uid(pod).to_owned();
        let pod_ip = if pod::host_network(pod) {
            self.host_ip.clone()
        } else {
            rt.sandbox()
                .and_then(|s| s.ips.first().cloned())
                .unwrap_or_default()
        };
        let mut all = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        let workers = all.entry(uid.clone()).or_default();
        let mut wanted = Vec::new();
        for (at, c) in pod::apps_and_sidecars(pod) {
            let Some(running) = rt.latest(&c.name).filter(|s| s.state == State::Running) else {
                continue;
            };
            for kind in [Kind::Startup, Kind::Liveness, Kind::Readiness] {
                if kind.of(c).is_some() {
                    wanted.push(((running.id.clone(), kind), at, running.started_at));
                }
            }
        }
        let keep: std::collections::HashSet<&(String, Kind)> =
            wanted.iter().map(|(k, _, _)| k).collect();
        let stale: Vec<(String, Kind)> = workers
            .keys()
            .filter(|k| !keep.contains(k))
            .cloned()
            .collect();
        if !stale.is_empty() {
            let mut results = self.results.write().unwrap_or_else(|p| p.into_inner());
            for key in stale {
                workers.remove(&key);
                results.remove(&key.0);
            }
        }
        // A container's startup worker wakes its readiness worker when it passes, so
        // that readiness is checked at once rather than a period later.
        let mut wakes: HashMap<String, Arc<tokio::sync::Notify>> = HashMap::new();
        for (key, at, started_at) in wanted {
            if workers.contains_key(&key) {
                continue;
            }
            let wake = wakes.entry(key.0.clone()).or_default().clone();
            let task = ProbeTask {
                runtime: self.runtime.clone(),
                checker: self.checker.clone(),
                results: self.results.clone(),
                updates: self.updates.clone(),
                events: self.events.clone(),
                counts: self.counts.clone(),
                pod: pod.clone(),
                at,
                container_id: key.0.clone(),
                kind: key.1,
                pod_ip: pod_ip.clone(),
                started: self.clock.instant_of(started_at),
                wake,
            };
            task.initialize();
            workers.insert(key, Worker(tokio::spawn(task.run())));
        }
    }

    /// Stops every worker of pod `uid` and forgets its results.
    pub fn remove_pod(&self, uid: &str) {
        let removed = self
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
        if let Some(workers) = removed {
            let mut results = self.results.write().unwrap_or_else(|p| p.into_inner());
            for (id, _) in workers.keys() {
                results.remove(id);
            }
        }
    }

    /// Stops every probe worker.
    pub fn stop(&self) {
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// How many probe workers run.
    pub fn workers(&self) -> usize {
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(HashMap::len)
            .sum()
    }
}

/// How the HTTP probe handler starts the message of a success the kubelet calls a
/// warning: a redirect to another host, not followed.
const REDIRECT_WARNING: &str = "Probe terminated redirects";

/// A check's result as the prober counts it: an error is a failure.
fn outcome(result: Result<Outcome, CheckError>) -> (bool, String) {
    match result {
        Ok(Outcome::Success(m)) => (true, m),
        Ok(Outcome::Failure(m)) => (false, m),
        Ok(Outcome::Error(m)) => (false, format!("probe errored: {m}")),
        Err(e) => (false, format!("probe errored: {e}")),
    }
}

struct ProbeTask<R> {
    runtime: Arc<R>,
    checker: Arc<dyn Checker>,
    results: ResultMap,
    updates: Arc<PodQueue<ProbeUpdate>>,
    events: Arc<dyn Recorder>,
    counts: Family<ProbeResult, Counter>,
    pod: Arc<k8s::Pod>,
    at: pod::Place,
    container_id: String,
    kind: Kind,
    pod_ip: String,
    started: Instant,
    /// Notified by the startup worker when the container has started.
    wake: Arc<tokio::sync::Notify>,
}

impl<R: CriRuntime + 'static> ProbeTask<R> {
    fn container(&self) -> &k8s::Container {
        self.at.container(&self.pod)
    }

    /// The results a new container starts with: not ready, not started, alive.
    fn initialize(&self) {
        let mut results = self.results.write().unwrap_or_else(|p| p.into_inner());
        let r = results.entry(self.container_id.clone()).or_default();
        match self.kind {
            Kind::Readiness => r.ready = r.ready.or(Some(false)),
            Kind::Startup => r.started = r.started.or(Some(false)),
            Kind::Liveness => {}
        }
    }

    fn started(&self) -> bool {
        self.container().startup_probe.is_none()
            || self
                .results
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&self.container_id)
                .is_some_and(|r| r.started == Some(true))
    }

    /// Stores a result that reached its threshold; returns whether it changed.
    fn record(&self, ok: bool) -> bool {
        let mut results = self.results.write().unwrap_or_else(|p| p.into_inner());
        let r = results.entry(self.container_id.clone()).or_default();
        let slot = match self.kind {
            Kind::Readiness => &mut r.ready,
            Kind::Startup => &mut r.started,
            Kind::Liveness => &mut r.live,
        };
        let mut changed = *slot != Some(ok);
        *slot = Some(ok);
        // A startup probe that fails for good restarts the container, as liveness does:
        // a change for the syncLoop even though "not started" is where it began.
        if self.kind == Kind::Startup && !ok && !r.startup_failed {
            r.startup_failed = true;
            changed = true;
        }
        changed
    }

    /// Counts one check in `prober_probe_total`.
    fn count(&self, ok: bool) {
        let m = &self.pod.metadata;
        self.counts
            .get_or_create(&ProbeResult {
                probe_type: format!("{:?}", self.kind),
                result: if ok { "successful" } else { "failed" }.into(),
                container: self.container().name.clone(),
                pod: m.name.clone().unwrap_or_default(),
                namespace: m.namespace.clone().unwrap_or_default(),
                pod_uid: pod::uid(&self.pod).to_owned(),
            })
            .inc();
    }

    async fn check_once(&self) -> (bool, String) {
        let c = self.container();
        let Some(probe) = self.kind.of(c) else {
            return (true, String::new());
        };
        let exec: Arc<dyn ContainerExec> =
            Arc::new(CriExec::new(self.runtime.clone(), &self.container_id));
        // A custom probe the pod asks for by annotation replaces the probe's handler.
        match pod::custom_probe(&self.pod, &c.name, self.kind.field()) {
            Some(Err(e)) => return (false, e),
            Some(Ok(custom)) => {
                let m = &self.pod.metadata;
                let seconds = u32::try_from(probe.timeout_seconds.unwrap_or(1).max(1)).unwrap_or(1);
                let target = Target {
                    pod_namespace: m.namespace.clone().unwrap_or_default(),
                    pod_name: m.name.clone().unwrap_or_default(),
                    pod_uid: pod::uid(&self.pod).to_owned(),
                    container_name: c.name.clone(),
                    pod_ip: self.pod_ip.clone(),
                    kind: self.kind.wit(),
                    action: Action::Custom(custom.args),
                    timeout_ms: seconds.saturating_mul(1000),
                };
                return outcome(self.checker.check(&custom.kind, &target, Some(exec)).await);
            }
            None => {}
        }
        let field = format!("{}.{}", self.at.field(), self.kind.field());
        let target =
            match convert::probe_target(&self.pod, c, probe, self.kind.wit(), &self.pod_ip, &field)
            {
                Ok(t) => t,
                Err(e) => return (false, e.to_string()),
            };
        let kind = convert::probe_kind(&target.action);
        outcome(self.checker.check(kind, &target, Some(exec)).await)
    }

    /// Counts a check; a failed one is logged and an `Unhealthy` event, one that passed
    /// with a warning (an HTTP redirect not followed) a `ProbeWarning` event.
    fn say(&self, ok: bool, message: &str) {
        self.count(ok);
        if ok && message.starts_with(REDIRECT_WARNING) {
            self.events.record(Event::warning(
                &self.pod,
                Some(&self.container().name),
                "ProbeWarning",
                format!("{} probe warning: {message}", self.kind.title()),
            ));
        }
        if ok {
            return;
        }
        tracing::info!(
            pod = %wasmlet_core::pod::PodKey::of(&self.pod),
            container = %self.container().name,
            probe = ?self.kind,
            "Probe failed: {message}"
        );
        self.events.record(Event::warning(
            &self.pod,
            Some(&self.container().name),
            "Unhealthy",
            format!("{} probe failed: {message}", self.kind.title()),
        ));
    }

    /// Tells the syncLoop of a result that changed.
    fn report(&self, ok: bool, message: String) {
        tracing::debug!(
            container = %self.container().name,
            probe = ?self.kind,
            ok,
            %message,
            "probe result changed"
        );
        self.updates.push(
            pod::uid(&self.pod),
            ProbeUpdate {
                container_id: self.container_id.clone(),
                container: self.container().name.clone(),
                kind: self.kind,
                ok,
                message,
            },
        );
    }

    async fn run(self) {
        let Some(probe) = self.kind.of(self.container()).cloned() else {
            return;
        };
        let secs = |v: Option<i32>, default: i32| {
            Duration::from_secs(u64::try_from(v.unwrap_or(default).max(0)).unwrap_or(0))
        };
        let period = secs(probe.period_seconds, 10).max(Duration::from_secs(1));
        let success_threshold = probe.success_threshold.unwrap_or(1).max(1);
        let failure_threshold = probe.failure_threshold.unwrap_or(3).max(1);
        tokio::time::sleep_until(self.started + secs(probe.initial_delay_seconds, 0)).await;
        let mut last: Option<bool> = None;
        let mut run = 0;
        loop {
            if self.kind == Kind::Startup || self.started() {
                let (ok, message) = self.check_once().await;
                self.say(ok, &message);
                if last == Some(ok) {
                    run += 1;
                } else {
                    last = Some(ok);
                    run = 1;
                }
                let threshold = if ok {
                    success_threshold
                } else {
                    failure_threshold
                };
                if run >= threshold && self.record(ok) {
                    self.report(ok, message);
                }
                let done = match self.kind {
                    // A startup probe stops at its first success.
                    Kind::Startup => run >= threshold,
                    // A failed liveness probe waits for the container to be replaced.
                    Kind::Liveness => !ok && run >= threshold,
                    Kind::Readiness => false,
                };
                if self.kind == Kind::Startup && ok && run >= threshold {
                    self.wake.notify_one();
                }
                if done {
                    return;
                }
            }
            if self.kind == Kind::Readiness && !self.started() {
                tokio::select! {
                    () = tokio::time::sleep(period) => {}
                    () = self.wake.notified() => {}
                }
                continue;
            }
            tokio::time::sleep(period).await;
        }
    }
}
