//! The shutdown manager: a delay lock of logind held while the node runs, its pods
//! stopped by priority when logind announces a shutdown, and the lock let go then.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1 as k8s;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use wasmlet_agent::agent::Agent;
use wasmlet_cri::CriRuntime;
use zbus::proxy::CacheProperties;
use zbus::zvariant::OwnedFd;

use crate::logind::{self, Login1Proxy, Systemd1Proxy};
use crate::plan::{self, Group, PodInfo};

/// The reason of a pod stopped for a shutdown.
pub const REASON: &str = "Terminated";
/// Its message.
pub const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// The reason a pod is not admitted while the node shuts down.
pub const NOT_ADMITTED_REASON: &str = "NodeShutdown";
/// Its message.
pub const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";
/// Why the node is not ready then.
pub const NOT_READY: &str = "node is shutting down";

/// How long after a lost connection to the system bus (or logind) it is tried again,
/// doubling up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// How long connecting to the system bus and logind's first answers may take.
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);
/// How long logind may take to read its configuration again.
const RELOAD_WAIT: Duration = Duration::from_secs(3);

/// The node's pods, as the manager stops them.
pub trait Pods: Send + Sync + 'static {
    /// The pods that have not finished.
    fn active(&self) -> Vec<PodInfo>;
    /// Stops pod `uid` within `grace`: Failed with [`REASON`] and [`MESSAGE`].
    fn kill(&self, uid: &str, grace: Duration);
    /// Whether pod `uid` has nothing running any more.
    fn stopped(&self, uid: &str) -> bool;
}

/// Whether the node is shutting down: admission and the node's Ready condition read it.
#[derive(Debug, Clone, Default)]
pub struct ShutdownState(Arc<AtomicBool>);

impl ShutdownState {
    /// Whether a shutdown is under way.
    pub fn shutting_down(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }

    /// Admission's answer for a new pod: refused while the node shuts down.
    pub fn admit(&self) -> Option<(String, String)> {
        self.shutting_down().then(|| {
            (
                NOT_ADMITTED_REASON.to_owned(),
                NOT_ADMITTED_MESSAGE.to_owned(),
            )
        })
    }

    /// Why the node is not ready, while it shuts down.
    pub fn not_ready(&self) -> Option<String> {
        self.shutting_down().then(|| NOT_READY.to_owned())
    }
}

/// The manager.
pub struct Manager {
    groups: Vec<Group>,
    pods: Arc<dyn Pods>,
    state: ShutdownState,
    drop_in: PathBuf,
}

impl Manager {
    /// A manager of `pods` stopping them by `groups`, telling `state`.
    pub fn new(groups: Vec<Group>, pods: Arc<dyn Pods>, state: ShutdownState) -> Self {
        Manager {
            groups,
            pods,
            state,
            drop_in: PathBuf::from(logind::LOGIND_DROP_IN),
        }
    }

    /// Writes logind's drop-in at `path` instead of [`logind::LOGIND_DROP_IN`].
    pub fn drop_in_at(mut self, path: PathBuf) -> Self {
        self.drop_in = path;
        self
    }

    /// Runs on the system bus until `stop`: a lost connection, or a logind that is not
    /// there yet, is said once and tried again with back-off.
    pub fn spawn(self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut delay = RETRY_FIRST;
            let mut said: Option<String> = None;
            loop {
                let session = async {
                    let connection =
                        tokio::time::timeout(CONNECT_DEADLINE, zbus::Connection::system())
                            .await
                            .map_err(|_| SessionError::NoBus(CONNECT_DEADLINE))?
                            .map_err(bus("the system bus"))?;
                    self.run_on(&connection).await
                };
                let error = tokio::select! {
                    r = session => r.err().unwrap_or(SessionError::Ended).to_string(),
                    () = stop.cancelled() => return,
                };
                if said.as_deref() == Some(error.as_str()) {
                    debug!(retry_in = ?delay, "graceful node shutdown: {error}");
                } else {
                    warn!(retry_in = ?delay, "graceful node shutdown is not armed: {error}");
                    said = Some(error);
                }
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stop.cancelled() => return,
                }
                delay = (delay * 2).min(RETRY_MAX);
            }
        })
    }

    /// One session on `connection`: the delay made long enough, the lock taken, and
    /// logind's announcements followed until they end (an error says why).
    pub async fn run_on(&self, connection: &zbus::Connection) -> Result<(), SessionError> {
        let login = Login1Proxy::builder(connection)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(bus("systemd-logind"))?;
        let mut signals = login
            .receive_prepare_for_shutdown()
            .await
            .map_err(bus("systemd-logind's PrepareForShutdown"))?;
        self.ensure_delay(connection, &login).await?;
        let mut lock = Some(inhibit(&login).await?);
        info!(
            grace = ?plan::requested(&self.groups),
            "graceful node shutdown: holding a delay lock of systemd-logind"
        );
        while let Some(signal) = signals.next().await {
            let start = signal
                .args()
                .map_err(bus("systemd-logind's PrepareForShutdown"))?
                .start;
            if start {
                warn!("the node is shutting down: stopping its pods");
                self.state.set(true);
                self.stop_pods().await;
                drop(lock.take());
                info!("the node's pods are stopped; the lock is released and the shutdown goes on");
            } else {
                info!("the node's shutdown was called off");
                self.state.set(false);
                if lock.is_none() {
                    lock = Some(inhibit(&login).await?);
                }
            }
        }
        Err(SessionError::Ended)
    }

    /// logind lets a delay lock hold a shutdown back at most `InhibitDelayMaxSec`: when
    /// that is shorter than the groups' periods together, it is raised in a drop-in and
    /// logind told to read its configuration again (as the kubelet does).
    async fn ensure_delay(
        &self,
        connection: &zbus::Connection,
        login: &Login1Proxy<'_>,
    ) -> Result<(), SessionError> {
        let requested = plan::requested(&self.groups);
        let current = delay(login).await?;
        if requested <= current {
            return Ok(());
        }
        let file = &self.drop_in;
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(|source| SessionError::DropIn {
                path: dir.to_owned(),
                source,
            })?;
        }
        std::fs::write(file, logind::drop_in(requested.as_secs())).map_err(|source| {
            SessionError::DropIn {
                path: file.clone(),
                source,
            }
        })?;
        Systemd1Proxy::new(connection)
            .await
            .map_err(bus("systemd"))?
            .kill_unit("systemd-logind.service", "all", 1)
            .await
            .map_err(bus("reloading systemd-logind (SIGHUP)"))?;
        let asked = Instant::now();
        loop {
            let now = delay(login).await?;
            if now >= requested {
                info!(file = %file.display(), delay = ?now, "systemd-logind's InhibitDelayMaxSec raised");
                return Ok(());
            }
            if asked.elapsed() > RELOAD_WAIT {
                return Err(SessionError::DelayTooShort {
                    now,
                    requested,
                    file: file.clone(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the pods group by group, each within its period.
    pub async fn stop_pods(&self) {
        let pods = self.pods.active();
        for (group, members) in plan::assign(&self.groups, &pods) {
            if members.is_empty() {
                continue;
            }
            for (uid, grace) in &members {
                let grace = Duration::from_secs(u64::try_from(*grace).unwrap_or(0));
                info!(pod = %uid, ?grace, priority = group.priority, "stopping the pod for the node's shutdown");
                self.pods.kill(uid, grace);
            }
            let period = Duration::from_secs(u64::try_from(group.grace_seconds).unwrap_or(0));
            let deadline = Instant::now() + period;
            while !members.iter().all(|(uid, _)| self.pods.stopped(uid)) {
                if Instant::now() >= deadline {
                    warn!(
                        priority = group.priority,
                        ?period,
                        "pods still running at the end of their group's shutdown period"
                    );
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Why a session with logind ended or could not start.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The system bus did not answer in time.
    #[error("the system bus: no answer within {0:?}")]
    NoBus(Duration),
    /// A call on the bus failed: what was being done, and the bus's error.
    #[error("{doing}: {source}")]
    Bus {
        /// What was asked.
        doing: &'static str,
        /// The bus's error.
        source: zbus::Error,
    },
    /// The drop-in raising logind's delay could not be written.
    #[error("{}: {source}", path.display())]
    DropIn {
        /// The file or its directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// logind did not take the longer delay.
    #[error(
        "systemd-logind's InhibitDelayMaxSec is {now:?} after {} was written: shorter than the shutdown grace period {requested:?}",
        file.display()
    )]
    DelayTooShort {
        /// The delay logind has.
        now: Duration,
        /// The delay the groups need.
        requested: Duration,
        /// The drop-in written.
        file: PathBuf,
    },
    /// logind's announcements ended.
    #[error("systemd-logind's signals ended")]
    Ended,
}

/// A bus error while doing `doing`.
fn bus(doing: &'static str) -> impl FnOnce(zbus::Error) -> SessionError {
    move |source| SessionError::Bus { doing, source }
}

/// logind's `InhibitDelayMaxUSec`.
async fn delay(login: &Login1Proxy<'_>) -> Result<Duration, SessionError> {
    login
        .inhibit_delay_max_usec()
        .await
        .map(Duration::from_micros)
        .map_err(bus("systemd-logind's InhibitDelayMaxUSec"))
}

/// A delay lock on shutdowns: held while the descriptor is open.
async fn inhibit(login: &Login1Proxy<'_>) -> Result<OwnedFd, SessionError> {
    let (what, who, why, mode) = logind::INHIBIT;
    login
        .inhibit(what, who, why, mode)
        .await
        .map_err(bus("taking systemd-logind's inhibitor lock"))
}

/// The agent's pods as the manager stops them: through the agent's eviction (phase
/// Failed, the reason and message, the `DisruptionTarget` condition, containers stopped
/// within the grace period).
pub struct AgentPods<R>(pub Arc<Agent<R>>);

/// An unfinished pod as the plan sees it.
fn pod_info(pod: &k8s::Pod) -> Option<PodInfo> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let spec = pod.spec.as_ref();
    Some(PodInfo {
        uid: pod.metadata.uid.clone()?,
        priority: spec
            .and_then(|s| s.priority)
            .unwrap_or(plan::DEFAULT_PRIORITY),
        grace_seconds: spec.and_then(|s| s.termination_grace_period_seconds),
    })
}

impl<R: CriRuntime + 'static> Pods for AgentPods<R> {
    fn active(&self) -> Vec<PodInfo> {
        self.0
            .ctx
            .statuses
            .pods()
            .iter()
            .filter_map(pod_info)
            .collect()
    }

    fn kill(&self, uid: &str, grace: Duration) {
        self.0.evict(uid, REASON, MESSAGE, grace);
    }

    fn stopped(&self, uid: &str) -> bool {
        self.0
            .ctx
            .cache
            .get(uid)
            .is_none_or(|rt| rt.running().next().is_none())
    }
}
