//! Stopping: one container (with its preStop hook and the kubelet's messages), the whole
//! pod within its grace period, cleanup of what a stopped pod leaves, dead containers'
//! garbage, and the container operations the prober and the hooks share.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use wasmlet_cri::{CriError, CriRuntime};
use wasmlet_plugin_host::convert;
use wasmlet_plugin_host::probe::{ContainerExec, Outcome, ProbeKind};

use super::{STOP_RETRY, SyncContext, SyncResult, Touched};
use crate::criconfig::{self, NodeContext};
use crate::events::Event;
use crate::prober::{Checker, CriExec};
use wasmlet_core::actions::{self, Kill};
use wasmlet_core::lifecycle::Outcome as WorkOutcome;
use wasmlet_core::pod::{self, PodKey};
use wasmlet_core::runtime::{PodRuntime, State};

impl<R: CriRuntime + 'static> SyncContext<R> {
    pub(super) async fn kill_container(
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
        let spec = pod::container_named(pod, &k.name);
        let ip = rt
            .sandbox()
            .and_then(|s| s.ips.first().cloned())
            .unwrap_or_default();
        // A failed probe's own grace period stands in for the pod's (the kubelet's
        // probe-level terminationGracePeriodSeconds).
        let grace = k.grace.unwrap_or(grace);
        if let Err(e) = self.ops.stop_container(pod, spec, &k.id, &ip, grace).await {
            warn!(pod = %PodKey::of(pod), container = %k.name, "StopContainer failed: {e}");
        }
    }

    /// Stops every running container (in parallel, each with its preStop hook; sidecars
    /// after the app containers, in reverse order) and every ready sandbox.
    pub(super) async fn stop_everything(
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
        let names: Vec<&str> = rt.running().map(|c| c.name.as_str()).collect();
        let mut order = actions::order::stop_after(pod, &names);
        let stopped = Arc::new(tokio::sync::watch::Sender::new(HashSet::<String>::new()));
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
            let turn = Turn {
                after: order.remove(&c.name).unwrap_or_default(),
                stopped: stopped.clone(),
            };
            let (ops, pod, ip) = (self.ops.clone(), pod.clone(), ip.clone());
            let (id, name) = (c.id.clone(), c.name.clone());
            stops.spawn(async move {
                let spec = pod::container_named(&pod, &name);
                let result = ops
                    .stop_container_after(&pod, spec, &id, &ip, grace, turn.wait())
                    .await;
                if result.is_ok() {
                    turn.stopped.send_modify(|s| {
                        s.insert(name);
                    });
                }
                result
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
        self.allocations.deactivate(&key.uid);
        self.refresh_and_report(pod).await;
        match result {
            Ok(()) => {
                info!(pod = %key, "pod stopped");
                // Nothing runs in it any more: its volumes go now, not when it is deleted.
                let pod_dir = criconfig::pod_dir(pod, &self.node);
                if let Err(e) = crate::volumes::tear_down(&pod_dir) {
                    warn!(pod = %key, "tearing down the pod's volumes: {e}");
                }
                Self::lock(&self.volumes_ready).remove(&key.uid);
                SyncResult::new(WorkOutcome::Stopped)
            }
            Err(e) => {
                warn!(pod = %key, "stopping the pod failed: {e}");
                SyncResult::retry(WorkOutcome::StopFailed, STOP_RETRY)
            }
        }
    }

    /// Removes a removed container's link in `/var/log/containers`.
    fn unlink_log(&self, rt: &PodRuntime, container: &str, id: &str) {
        let link =
            criconfig::legacy_log_symlink(&self.node, (&rt.name, &rt.namespace), container, id);
        let _ = std::fs::remove_file(link);
    }

    /// Removes a stopped pod's containers, sandboxes and directories.
    pub async fn cleanup_pod(&self, pod: &Arc<k8s::Pod>) -> SyncResult {
        let key = PodKey::of(pod);
        let observed = Instant::now();
        let result = async {
            let rt = self.refresh(&key.uid).await?;
            for c in &rt.containers {
                self.runtime.remove_container(&c.id).await?;
                self.unlink_log(&rt, &c.name, &c.id);
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
        if let Err(e) = crate::volumes::remove_pod_dir(&criconfig::pod_dir(pod, &self.node)) {
            warn!(pod = %key, "removing the pod's directory: {e}");
        }
        if let Some(source) = &self.volume_source {
            source.unregister_pod(&key.uid);
        }
        let _ = std::fs::remove_dir_all(criconfig::log_directory(pod, &self.node));
        if let Some(cgroups) = &self.node.pod_cgroups {
            for left in cgroups.remove(&key.uid).await {
                warn!(pod = %key, cgroup = %left.display(), "pod cgroup still in use; housekeeping retries");
            }
        }
        self.cache.remove(&key.uid, observed);
        self.allocations.remove(&key.uid);
        Self::lock(&self.volumes_ready).remove(&key.uid);
        Self::lock(&self.said).remove(&key.uid);
        Self::lock(&self.crash_backoff).reset_prefix(&format!("{}/", key.uid));
        Self::lock(&self.pull_backoff).reset_prefix(&format!("{}/", key.uid));
        Self::lock(&self.mount_backoff).reset(&key.uid);
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
            match self.runtime.remove_container(&c.id).await {
                Ok(()) => self.unlink_log(rt, &c.name, &c.id),
                Err(e) => debug!(container = %c.id, "garbage collection: {e}"),
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

/// A container's turn to stop in a pod with sidecars: once the containers it stops
/// after have stopped.
struct Turn {
    after: Vec<String>,
    stopped: Arc<tokio::sync::watch::Sender<HashSet<String>>>,
}

impl Turn {
    /// Waits for the turn.
    async fn wait(&self) {
        if self.after.is_empty() {
            return;
        }
        let mut stopped = self.stopped.subscribe();
        let _ = stopped
            .wait_for(|s| self.after.iter().all(|name| s.contains(name)))
            .await;
    }
}

/// The exec hooks' own deadline, in seconds: none to speak of (the kubelet runs them
/// with no timeout); a day keeps the exec handler's millisecond count in range.
const HOOK_EXEC_TIMEOUT: i32 = 86_400;

/// The least a container is given between SIGTERM and SIGKILL, whatever its preStop
/// hook and its wait for its turn took of the grace period (the kubelet's
/// minimumGracePeriodInSeconds): a sidecar whose hook ran out the grace period still
/// gets its SIGTERM two seconds before the SIGKILL.
const MINIMUM_STOP_SECONDS: i64 = 2;

/// StopContainer's timeout for what is `left` of the grace period: whole seconds,
/// rounded up (a grace period that has not quite run out still gets its second), and
/// never under [`MINIMUM_STOP_SECONDS`].
fn stop_timeout(left: Duration) -> i64 {
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    i64::try_from(secs)
        .unwrap_or(i64::MAX)
        .max(MINIMUM_STOP_SECONDS)
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
    /// `sleep` hook sleeps), waiting for it at most `timeout`. As the kubelet's, a hook
    /// is waited for, not cut short: it runs in a task of its own, an exec hook with no
    /// deadline of its own (`HOOK_EXEC_TIMEOUT`) until it ends or its container
    /// stops — a preStop hook that outlives the grace period runs until the SIGKILL.
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
            timeout_seconds: Some(if hook.exec.is_some() {
                HOOK_EXEC_TIMEOUT
            } else {
                i32::try_from(timeout.as_secs().max(1)).unwrap_or(i32::MAX)
            }),
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
        let checker = self.checker.clone();
        let hook = tokio::spawn(async move { checker.check(kind, &target, Some(exec)).await });
        match tokio::time::timeout(timeout, hook).await {
            Ok(Ok(Ok(Outcome::Success(_)))) => Ok(()),
            Ok(Ok(Ok(Outcome::Failure(m) | Outcome::Error(m)))) => Err(m),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(e)) => Err(e.to_string()),
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
        let now = std::future::ready(());
        self.stop_container_after(pod, c, id, pod_ip, grace, now)
            .await
    }

    /// Stops one container once `turn` has come: its preStop hook first (within the grace period), then the wait for its turn (no
    /// longer than what is left of the grace period), then StopContainer with what is
    /// left — at least `MINIMUM_STOP_SECONDS`, as the kubelet gives every container.
    pub async fn stop_container_after(
        &self,
        pod: &k8s::Pod,
        c: Option<&k8s::Container>,
        id: &str,
        pod_ip: &str,
        grace: i64,
        turn: impl std::future::Future<Output = ()>,
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
        // What is left after the hook is also the longest the turn is waited for.
        let _ = tokio::time::timeout(grace_d.saturating_sub(started.elapsed()), turn).await;
        let secs = stop_timeout(grace_d.saturating_sub(started.elapsed()));
        self.runtime.stop_container(id, secs).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A hook handler that takes `lasts` and then says it passed, noting it finished.
    struct SlowHook {
        lasts: Duration,
        finished: Arc<AtomicBool>,
    }

    impl Checker for SlowHook {
        fn check<'a>(
            &'a self,
            _kind: &'a str,
            target: &'a wasmlet_plugin_host::probe::Target,
            _exec: Option<Arc<dyn ContainerExec>>,
        ) -> std::pin::Pin<
            Box<dyn Future<Output = Result<Outcome, crate::prober::CheckError>> + Send + 'a>,
        > {
            // An exec hook is given no deadline of its own.
            assert_eq!(target.timeout_ms, 86_400_000);
            Box::pin(async move {
                tokio::time::sleep(self.lasts).await;
                self.finished.store(true, Ordering::SeqCst);
                Ok(Outcome::Success(String::new()))
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hook_is_waited_for_within_its_time_but_not_cut_short() {
        let finished = Arc::new(AtomicBool::new(false));
        let ops = ContainerOps {
            runtime: Arc::new(wasmlet_cri_sim::Simulator::new()),
            checker: Arc::new(SlowHook {
                lasts: Duration::from_secs(40),
                finished: finished.clone(),
            }),
            node: NodeContext::default(),
        };
        let pod: k8s::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "i", "lifecycle": {"preStop":
                {"exec": {"command": ["sh", "-c", "while true; do sleep 1; done"]}}}}]}
        }))
        .expect("pod");
        let c = &pod.spec.as_ref().expect("spec").containers[0];
        let hook = c
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .expect("hook");
        let waited = ops
            .run_hook(&pod, c, hook, "id", "10.0.0.1", Duration::from_secs(30))
            .await;
        assert_eq!(waited, Err("did not finish within 30s".to_owned()));
        assert!(!finished.load(Ordering::SeqCst));
        // The kubelet stops waiting, not the hook: it runs on until it ends (or its
        // container is killed).
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(finished.load(Ordering::SeqCst), "the hook was cut short");
    }

    #[test]
    fn a_container_always_gets_two_seconds_between_sigterm_and_sigkill() {
        // A preStop hook that never exits ran out a 30 s grace period: the kubelet still
        // stops the container with 2 s (the sidecar e2e spec measures the hook's 30 s + 2).
        assert_eq!(stop_timeout(Duration::ZERO), 2);
        assert_eq!(stop_timeout(Duration::from_millis(1500)), 2);
        // Otherwise what is left, rounded up to whole seconds.
        assert_eq!(stop_timeout(Duration::from_millis(2001)), 3);
        assert_eq!(stop_timeout(Duration::from_secs(30)), 30);
    }
}
