//! Pod workers: one task per pod UID, driven by the [`WorkerState`] state machine, and
//! the [`DueQueue`] of pods whose next sync is due (back-off expiry, retries, the
//! periodic resync), which the syncLoop watches.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;
use wasmlet_cri::CriRuntime;

use crate::metrics::Operation;
use crate::sync::SyncContext;
use wasmlet_core::lifecycle::{Lifecycle, Request, Work, WorkerState};
use wasmlet_core::pod::{self, PodKey};

/// Due times in order, and each pod's.
type DueTimes = (BTreeSet<(Instant, String)>, HashMap<String, Instant>);

/// Pods whose next sync is due at a time: one time per pod, the latest asked.
#[derive(Debug, Default)]
pub struct DueQueue {
    inner: Mutex<DueTimes>,
    changed: Notify,
}

impl DueQueue {
    /// An empty queue.
    pub fn new() -> Self {
        DueQueue::default()
    }

    /// Pod `uid` is due at `at` (replacing the time it had).
    pub fn schedule(&self, uid: &str, at: Instant) {
        {
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let (set, by_pod) = &mut *guard;
            if let Some(old) = by_pod.insert(uid.to_owned(), at) {
                set.remove(&(old, uid.to_owned()));
            }
            set.insert((at, uid.to_owned()));
        }
        self.changed.notify_one();
    }

    /// Forgets pod `uid`.
    pub fn cancel(&self, uid: &str) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (set, by_pod) = &mut *guard;
        if let Some(old) = by_pod.remove(uid) {
            set.remove(&(old, uid.to_owned()));
        }
    }

    /// The earliest due time.
    pub fn next(&self) -> Option<Instant> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.first().map(|(at, _)| *at)
    }

    /// Takes the pods due at or before `now`.
    pub fn take_due(&self, now: Instant) -> Vec<String> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (set, by_pod) = &mut *guard;
        let mut due = Vec::new();
        while let Some((at, uid)) = set.first().cloned() {
            if at > now {
                break;
            }
            set.pop_first();
            by_pod.remove(&uid);
            due.push(uid);
        }
        due
    }

    /// Waits until a time is scheduled (it may be earlier than the one being waited for).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

struct Handle {
    state: Mutex<WorkerState>,
    wake: Notify,
    /// The pod came back (same UID) while it was being stopped: start it again once
    /// the old one is cleaned up.
    readd: Mutex<Option<Arc<k8s::Pod>>>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Handle {
    fn new(pod: Arc<k8s::Pod>) -> Arc<Self> {
        Arc::new(Handle {
            state: Mutex::new(WorkerState::new(pod)),
            wake: Notify::new(),
            readd: Mutex::new(None),
            task: Mutex::new(None),
        })
    }

    fn readd(&self) -> std::sync::MutexGuard<'_, Option<Arc<k8s::Pod>>> {
        self.readd.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, WorkerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The pod workers.
pub struct PodWorkers<R> {
    ctx: Arc<SyncContext<R>>,
    workers: Mutex<HashMap<String, Arc<Handle>>>,
    /// Static pods waiting for another static pod of the same `namespace/name` to stop
    /// (an updated manifest is a new UID): never two at once, as the kubelet.
    held: Mutex<HashMap<String, Arc<k8s::Pod>>>,
    due: Arc<DueQueue>,
    resync: Duration,
}

impl<R: CriRuntime + 'static> PodWorkers<R> {
    /// Workers applying work through `ctx`; each pod is synced again `resync` after its
    /// last sync (the kubelet's syncFrequency) unless something comes first.
    pub fn new(ctx: Arc<SyncContext<R>>, due: Arc<DueQueue>, resync: Duration) -> Arc<Self> {
        Arc::new(PodWorkers {
            ctx,
            workers: Mutex::default(),
            held: Mutex::default(),
            due,
            resync,
        })
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Handle>>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spawn(
        self: &Arc<Self>,
        map: &mut HashMap<String, Arc<Handle>>,
        pod: Arc<k8s::Pod>,
    ) -> Arc<Handle> {
        let uid = pod::uid(&pod).to_owned();
        let handle = Handle::new(pod);
        map.insert(uid.clone(), handle.clone());
        let task = tokio::spawn(self.clone().run(uid, handle.clone()));
        *handle.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task.abort_handle());
        handle
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<k8s::Pod>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a worker of another pod of `pod`'s namespace and name has not finished.
    fn namesake_running(map: &HashMap<String, Arc<Handle>>, pod: &k8s::Pod, uid: &str) -> bool {
        // Compared field by field: this runs for every static pod added, over every
        // worker (1,000 pods in one set: a quarter of a second while it formatted names).
        let (namespace, name) = (
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
        );
        map.iter().any(|(u, h)| {
            u != uid && {
                let state = h.state();
                let m = &state.pod().metadata;
                !state.is_done()
                    && m.name.as_deref().unwrap_or_default() == name
                    && m.namespace.as_deref().unwrap_or_default() == namespace
            }
        })
    }

    /// A pod added by its source: starts its worker, or — if a pod with the same UID
    /// is still being stopped — starts it again once that one is cleaned up. A static
    /// pod whose namesake (its manifest's previous version) is still stopping waits for
    /// it.
    pub fn add(self: &Arc<Self>, pod: Arc<k8s::Pod>) {
        let uid = pod::uid(&pod).to_owned();
        let mut map = self.map();
        if pod::is_static(&pod)
            && !map.contains_key(&uid)
            && Self::namesake_running(&map, &pod, &uid)
        {
            debug!(pod = %PodKey::of(&pod), "waiting for the static pod's previous version to stop");
            self.held().insert(PodKey::of(&pod).full_name(), pod);
            return;
        }
        match map.get(&uid).cloned() {
            None => {
                self.spawn(&mut map, pod);
            }
            Some(h) if h.state().is_done() => {
                self.spawn(&mut map, pod);
            }
            Some(h) if h.state().lifecycle() != Lifecycle::Syncing => {
                *h.readd() = Some(pod);
            }
            Some(h) => {
                h.state().request(Request::Sync(pod));
                h.wake.notify_one();
            }
        }
    }

    /// Asks for a sync of `pod` with a new spec (or again).
    pub fn update(self: &Arc<Self>, pod: Arc<k8s::Pod>) {
        let uid = pod::uid(&pod).to_owned();
        let mut map = self.map();
        match map.get(&uid).cloned() {
            Some(h) => {
                h.state().request(Request::Sync(pod));
                h.wake.notify_one();
            }
            None => {
                self.spawn(&mut map, pod);
            }
        }
    }

    /// Drops pod `uid` if it is a static pod waiting to start.
    pub fn drop_held(&self, uid: &str) {
        self.held().retain(|_, p| pod::uid(p) != uid);
    }

    /// Starts the static pod waiting for `full_name`, if its namesake is done now.
    fn start_held(self: &Arc<Self>, full_name: &str) {
        let mut map = self.map();
        let mut held = self.held();
        let Some(pod) = held.get(full_name).cloned() else {
            return;
        };
        if Self::namesake_running(&map, &pod, pod::uid(&pod)) {
            return;
        }
        held.remove(full_name);
        drop(held);
        debug!(pod = %PodKey::of(&pod), "the static pod's previous version stopped; starting it");
        self.spawn(&mut map, pod);
    }

    /// Forgets workers that are done, unless `keep` says their pod is still wanted (a
    /// finished pod stays until removed).
    pub fn remove_done(&self, keep: impl Fn(&str) -> bool) {
        self.map()
            .retain(|uid, h| keep(uid) || !h.state().is_done());
    }

    /// Asks for pod `uid` to be stopped within `grace`. A pod without a worker that the
    /// runtime still has (an orphan) gets one, built from `pod`.
    pub fn kill(self: &Arc<Self>, pod: Arc<k8s::Pod>, grace: Duration) {
        let uid = pod::uid(&pod).to_owned();
        let mut map = self.map();
        let handle = match map.get(&uid) {
            Some(h) => {
                *h.readd() = None;
                h.clone()
            }
            // An orphan: its first sync is replaced by the kill before the task runs.
            None => self.spawn(&mut map, pod),
        };
        drop(map);
        handle.state().request(Request::Kill { grace });
        handle.wake.notify_one();
    }

    /// Stops every worker task (the agent is stopping; pods keep running).
    pub fn stop(&self) {
        for (_, h) in self.map().drain() {
            if let Some(task) = h.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
                task.abort();
            }
        }
        self.ctx.prober.stop();
    }

    /// Asks for another run of pod `uid`'s current work (its sync, or a retry).
    pub fn resync(&self, uid: &str) {
        if let Some(h) = self.map().get(uid).cloned() {
            h.state().resync();
            h.wake.notify_one();
        }
    }

    /// Where pod `uid` is in its life, if it has a worker.
    pub fn lifecycle(&self, uid: &str) -> Option<Lifecycle> {
        self.map().get(uid).map(|h| h.state().lifecycle())
    }

    /// Whether pod `uid` has a worker that is not done.
    pub fn is_active(&self, uid: &str) -> bool {
        self.map().get(uid).is_some_and(|h| !h.state().is_done())
    }

    /// The UIDs with a worker.
    pub fn uids(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }

    /// How many workers there are.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    async fn run(self: Arc<Self>, uid: String, handle: Arc<Handle>) {
        loop {
            let work = handle.state().take_next();
            if matches!(work, Some(Work::Cleanup(_))) && handle.readd().is_some() {
                // The pod came back while stopping: its stopped containers stay (they
                // count its restarts, as the kubelet's), only the new start follows.
                handle
                    .state()
                    .finished(wasmlet_core::lifecycle::Outcome::CleanedUp);
                continue;
            }
            let Some(work) = work else {
                if handle.state().is_done() {
                    self.due.cancel(&uid);
                    let readd = handle.readd().take();
                    match readd {
                        Some(pod) => *handle.state() = WorkerState::new(pod),
                        None => {
                            let name = PodKey::of(handle.state().pod()).full_name();
                            self.start_held(&name);
                            return;
                        }
                    }
                    continue;
                }
                handle.wake.notified().await;
                continue;
            };
            let started = Instant::now();
            let kind = work.kind();
            let result = match &work {
                Work::Sync(pod) => self.ctx.sync_pod(pod).await,
                Work::Terminate { pod, grace } => self.ctx.terminate_pod(pod, *grace).await,
                Work::Cleanup(pod) => self.ctx.cleanup_pod(pod).await,
            };
            self.ctx
                .metrics
                .worker_duration
                .get_or_create(&Operation {
                    operation: kind.to_owned(),
                })
                .observe(started.elapsed().as_secs_f64());
            let pod = match &work {
                Work::Sync(p) | Work::Cleanup(p) | Work::Terminate { pod: p, .. } => p,
            };
            debug!(pod = %PodKey::of(pod), work = kind, outcome = ?result.outcome, took = ?started.elapsed(), "pod work done");
            if kind == "sync" {
                self.ctx.statuses.first_sync_done(&uid);
            }
            let mut state = handle.state();
            state.finished(result.outcome);
            let due = match (result.requeue, state.lifecycle()) {
                (Some(at), _) => Some(at),
                (None, Lifecycle::Syncing) => Some(Instant::now() + self.resync),
                (None, _) => None,
            };
            drop(state);
            if let Some(at) = due {
                self.due.schedule(&uid, at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn due_times_are_per_pod_and_taken_in_order() {
        let q = DueQueue::new();
        let now = Instant::now();
        q.schedule("a", now + Duration::from_secs(5));
        q.schedule("b", now + Duration::from_secs(2));
        q.schedule("a", now + Duration::from_secs(1));
        assert_eq!(q.next(), Some(now + Duration::from_secs(1)));
        assert_eq!(q.take_due(now + Duration::from_secs(1)), ["a"]);
        assert!(q.take_due(now + Duration::from_secs(1)).is_empty());
        q.cancel("b");
        assert_eq!(q.next(), None);
    }
}
