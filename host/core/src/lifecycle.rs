//! A pod worker's state, as a pure state machine: what it is doing with its pod
//! ([`Lifecycle`]), which work is running and which waits.
//!
//! The rules, all in [`WorkerState`]:
//! - one piece of work runs at a time; a request that comes meanwhile waits, and a newer
//!   one replaces an older one that waits;
//! - a kill is never replaced by a sync: once terminating, syncs are ignored;
//! - a termination grace period can only shorten;
//! - SyncPod → TerminatingPod → TerminatedPod, never back: a pod whose UID comes back is
//!   a new worker;
//! - a pod that finished on its own (every container exited for good) is stopped but
//!   kept — its containers are what its status shows — until it is removed; a removed
//!   pod is cleaned up as soon as it is stopped.
//!
//! The worker task drives it: [`WorkerState::request`] when the syncLoop sends something,
//! [`WorkerState::take_next`] to take the work to run, [`WorkerState::finished`] with the
//! [`Outcome`]. No I/O and no clock here, so every transition is a unit test.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;

/// Where a pod is in its life on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// The pod should run: syncs create and restart its containers.
    Syncing,
    /// The pod is being stopped with at most this grace period.
    Terminating {
        /// The grace period of the kill (only ever shortened).
        grace: Duration,
    },
    /// Every container is stopped; what remains is cleanup.
    Terminated,
}

/// What the syncLoop asks of a worker.
#[derive(Debug, Clone)]
pub enum Request {
    /// Make the runtime match this pod (the newest spec).
    Sync(Arc<k8s::Pod>),
    /// Stop the pod within `grace`.
    Kill {
        /// The longest the containers get to stop.
        grace: Duration,
    },
}

/// A piece of work for the worker task.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// syncPod: compute and apply the actions for the pod.
    Sync(Arc<k8s::Pod>),
    /// killPod: preStop hooks, stop the containers, stop the sandbox.
    Terminate {
        /// The pod being stopped.
        pod: Arc<k8s::Pod>,
        /// The grace period.
        grace: Duration,
    },
    /// Cleanup after termination: remove the containers and the sandbox.
    Cleanup(Arc<k8s::Pod>),
}

impl Work {
    /// The work's name in logs and metrics (`sync`, `terminate`, `cleanup`).
    pub fn kind(&self) -> &'static str {
        match self {
            Work::Sync(_) => "sync",
            Work::Terminate { .. } => "terminate",
            Work::Cleanup(_) => "cleanup",
        }
    }
}

/// How a piece of work ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A sync applied its actions (or failed and will be retried by the worker).
    Synced,
    /// A sync found the pod finished for good: every app container exited and none will
    /// restart. The pod is terminated with this grace period: its own when sidecars
    /// still run (they are stopped as the kubelet stops a pod), else none.
    Finished {
        /// The grace period what still runs gets.
        grace: Duration,
    },
    /// The node ended the pod (activeDeadlineSeconds): it is stopped with this grace
    /// period and kept, Failed, until removed.
    Evicted {
        /// The pod's grace period.
        grace: Duration,
    },
    /// Every container and the sandbox are stopped.
    Stopped,
    /// Stopping failed; it is tried again.
    StopFailed,
    /// The pod's runtime objects are removed.
    CleanedUp,
    /// Cleanup failed; it is tried again.
    CleanupFailed,
}

/// One pod's worker state.
#[derive(Debug, Clone)]
pub struct WorkerState {
    pod: Arc<k8s::Pod>,
    lifecycle: Lifecycle,
    pending: Option<Work>,
    running: bool,
    /// A kill was asked for (the pod is gone from its source): clean up once stopped.
    removed: bool,
    done: bool,
}

impl WorkerState {
    /// A worker for a new pod, with its first sync waiting.
    pub fn new(pod: Arc<k8s::Pod>) -> Self {
        WorkerState {
            pending: Some(Work::Sync(pod.clone())),
            pod,
            lifecycle: Lifecycle::Syncing,
            running: false,
            removed: false,
            done: false,
        }
    }

    /// The pod, as last requested.
    pub fn pod(&self) -> &Arc<k8s::Pod> {
        &self.pod
    }

    /// Where the pod is in its life.
    pub fn lifecycle(&self) -> Lifecycle {
        self.lifecycle
    }

    /// Whether work is running now.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Whether work waits.
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Whether the pod is terminated and cleaned up: the worker can go.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Takes a request from the syncLoop.
    pub fn request(&mut self, request: Request) {
        match (self.lifecycle, request) {
            (Lifecycle::Syncing, Request::Sync(pod)) => {
                self.pod = pod.clone();
                self.pending = Some(Work::Sync(pod));
            }
            (Lifecycle::Syncing, Request::Kill { grace }) => {
                self.removed = true;
                self.lifecycle = Lifecycle::Terminating { grace };
                self.pending = Some(Work::Terminate {
                    pod: self.pod.clone(),
                    grace,
                });
            }
            // A kill is never replaced by a sync.
            (Lifecycle::Terminating { .. } | Lifecycle::Terminated, Request::Sync(_)) => {}
            (Lifecycle::Terminating { grace: current }, Request::Kill { grace }) => {
                self.removed = true;
                // Only a shorter grace period changes anything; it reruns the kill.
                if grace < current {
                    self.lifecycle = Lifecycle::Terminating { grace };
                    self.pending = Some(Work::Terminate {
                        pod: self.pod.clone(),
                        grace,
                    });
                }
            }
            // A finished pod that is now removed: clean it up.
            (Lifecycle::Terminated, Request::Kill { .. }) => {
                if !self.removed && !self.done {
                    self.removed = true;
                    self.pending = Some(Work::Cleanup(self.pod.clone()));
                }
            }
        }
    }

    /// The work to run now, if nothing runs and something waits.
    pub fn take_next(&mut self) -> Option<Work> {
        if self.running || self.done {
            return None;
        }
        let work = self.pending.take()?;
        self.running = true;
        Some(work)
    }

    /// Requests a sync of the current pod unless work of any kind already waits (the
    /// worker's own retries and periodic resyncs).
    pub fn resync(&mut self) {
        if self.pending.is_some() || self.done {
            return;
        }
        self.pending = Some(match self.lifecycle {
            Lifecycle::Syncing => Work::Sync(self.pod.clone()),
            Lifecycle::Terminating { grace } => Work::Terminate {
                pod: self.pod.clone(),
                grace,
            },
            Lifecycle::Terminated if self.removed => Work::Cleanup(self.pod.clone()),
            Lifecycle::Terminated => return,
        });
    }

    /// Records how the running work ended.
    pub fn finished(&mut self, outcome: Outcome) {
        self.running = false;
        match outcome {
            Outcome::Synced => {}
            Outcome::Finished { grace } | Outcome::Evicted { grace } => {
                if self.lifecycle == Lifecycle::Syncing {
                    self.lifecycle = Lifecycle::Terminating { grace };
                    self.pending = Some(Work::Terminate {
                        pod: self.pod.clone(),
                        grace,
                    });
                }
            }
            Outcome::Stopped => {
                // A shorter kill that waits is moot once everything is stopped.
                self.lifecycle = Lifecycle::Terminated;
                self.pending = self.removed.then(|| Work::Cleanup(self.pod.clone()));
            }
            Outcome::StopFailed | Outcome::CleanupFailed => {}
            Outcome::CleanedUp => {
                self.done = true;
                self.pending = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Arc<k8s::Pod> {
        let mut p = k8s::Pod::default();
        p.metadata.name = Some(name.into());
        Arc::new(p)
    }

    fn name(w: &Work) -> String {
        let p = match w {
            Work::Sync(p) | Work::Cleanup(p) | Work::Terminate { pod: p, .. } => p,
        };
        format!("{}:{}", w.kind(), p.metadata.name.as_deref().unwrap_or(""))
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn one_work_at_a_time_and_the_newest_sync_wins() {
        let mut w = WorkerState::new(pod("v1"));
        let first = w.take_next().expect("first sync");
        assert_eq!(name(&first), "sync:v1");
        assert_eq!(w.take_next(), None, "one sync in flight");
        w.request(Request::Sync(pod("v2")));
        w.request(Request::Sync(pod("v3")));
        assert_eq!(w.take_next(), None, "still running");
        w.finished(Outcome::Synced);
        assert_eq!(name(&w.take_next().expect("pending")), "sync:v3");
        w.finished(Outcome::Synced);
        assert_eq!(w.take_next(), None, "v2 was replaced, not queued");
    }

    #[test]
    fn a_kill_is_never_replaced_by_a_sync() {
        let mut w = WorkerState::new(pod("p"));
        w.take_next();
        w.request(Request::Kill { grace: S(30) });
        w.request(Request::Sync(pod("p2")));
        assert_eq!(w.lifecycle(), Lifecycle::Terminating { grace: S(30) });
        w.finished(Outcome::Synced);
        let next = w.take_next().expect("kill");
        assert_eq!(
            next,
            Work::Terminate {
                pod: pod("p"),
                grace: S(30)
            }
        );
    }

    #[test]
    fn grace_only_shortens() {
        let mut w = WorkerState::new(pod("p"));
        w.request(Request::Kill { grace: S(30) });
        assert!(matches!(w.take_next(), Some(Work::Terminate { grace, .. }) if grace == S(30)));
        w.request(Request::Kill { grace: S(60) });
        assert!(!w.has_pending(), "a longer grace changes nothing");
        w.request(Request::Kill { grace: S(5) });
        assert_eq!(w.lifecycle(), Lifecycle::Terminating { grace: S(5) });
        w.finished(Outcome::StopFailed);
        assert!(matches!(w.take_next(), Some(Work::Terminate { grace, .. }) if grace == S(5)));
    }

    #[test]
    fn sync_terminating_terminated_then_done() {
        let mut w = WorkerState::new(pod("p"));
        w.take_next();
        w.finished(Outcome::Synced);
        w.request(Request::Kill { grace: S(2) });
        w.take_next();
        w.finished(Outcome::Stopped);
        assert_eq!(w.lifecycle(), Lifecycle::Terminated);
        w.request(Request::Kill { grace: S(1) });
        w.request(Request::Sync(pod("q")));
        assert_eq!(name(&w.take_next().expect("cleanup")), "cleanup:p");
        w.finished(Outcome::CleanupFailed);
        assert_eq!(w.take_next(), None);
        w.resync();
        assert_eq!(name(&w.take_next().expect("retry")), "cleanup:p");
        w.finished(Outcome::CleanedUp);
        assert!(w.is_done());
        w.resync();
        assert_eq!(w.take_next(), None);
    }

    #[test]
    fn a_finished_pod_is_stopped_and_kept_until_removed() {
        let mut w = WorkerState::new(pod("job"));
        w.take_next();
        w.finished(Outcome::Finished {
            grace: Duration::ZERO,
        });
        assert_eq!(
            w.lifecycle(),
            Lifecycle::Terminating {
                grace: Duration::ZERO
            }
        );
        assert_eq!(name(&w.take_next().expect("stop")), "terminate:job");
        w.finished(Outcome::Stopped);
        assert_eq!(w.lifecycle(), Lifecycle::Terminated);
        assert_eq!(w.take_next(), None, "its containers stay for its status");
        w.resync();
        assert_eq!(w.take_next(), None);
        w.request(Request::Kill { grace: S(30) });
        assert_eq!(name(&w.take_next().expect("cleanup")), "cleanup:job");
        w.finished(Outcome::CleanedUp);
        assert!(w.is_done());
    }

    #[test]
    fn an_evicted_pod_is_stopped_with_its_grace_and_kept() {
        let mut w = WorkerState::new(pod("a"));
        w.take_next();
        w.finished(Outcome::Evicted {
            grace: Duration::from_secs(30),
        });
        let grace = Duration::from_secs(30);
        assert_eq!(w.lifecycle(), Lifecycle::Terminating { grace });
        assert!(matches!(w.take_next(), Some(Work::Terminate { grace: g, .. }) if g == grace));
        w.request(Request::Sync(pod("a")));
        assert!(w.take_next().is_none(), "no sync once terminating");
        w.finished(Outcome::Stopped);
        assert_eq!(w.lifecycle(), Lifecycle::Terminated);
        assert!(!w.is_done(), "kept until removed");
    }

    #[test]
    fn resync_does_not_replace_waiting_work() {
        let mut w = WorkerState::new(pod("p"));
        w.take_next();
        w.request(Request::Kill { grace: S(3) });
        w.resync();
        w.finished(Outcome::Synced);
        assert!(matches!(w.take_next(), Some(Work::Terminate { .. })));
        w.finished(Outcome::StopFailed);
        w.resync();
        assert!(matches!(w.take_next(), Some(Work::Terminate { grace, .. }) if grace == S(3)));
    }
}
