//! The status manager: every pod the agent serves with its latest status, for
//! `GET /pods` and the API server. Pods are listed in the order they were added; a
//! status is recomputed whenever the runtime, a probe or a sync changes what it depends
//! on, and each change of a pod's status raises its [`PodEntry::version`].
//!
//! Whoever reports statuses elsewhere (cluster mode's status sync) calls
//! [`StatusManager::follow`] and then takes the UIDs of changed pods with
//! [`StatusManager::take_changes`], after [`StatusManager::changed`] wakes it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::Notify;

use k8s_openapi::api::core::v1 as k8s;

use wasmlet_core::runtime::PodRuntime;
use wasmlet_core::status::{self, ProbeView, Waiting};

/// One pod as the status manager holds it.
#[derive(Debug, Clone)]
pub struct PodEntry {
    /// The pod.
    pub pod: Arc<k8s::Pod>,
    /// Its latest status.
    pub status: k8s::PodStatus,
    /// Why containers wait, from the last sync.
    pub waiting: BTreeMap<String, Waiting>,
    /// When the agent first worked on it (RFC 3339).
    pub start_time: Option<String>,
    /// Refused by admission: its status is final.
    pub rejected: bool,
    /// When the agent first saw it.
    pub seen: tokio::time::Instant,
    /// Whether it has reported Running yet (for the pod start metric).
    pub ran: bool,
    /// Raised on every change of `status`; 0 until the first status is computed.
    pub version: u64,
    /// Its containers and sandboxes are removed (after a deletion): its last status is
    /// final.
    pub reclaimed: bool,
    /// Its first sync has run (a pod that starts at once is Running by then).
    pub first_synced: bool,
    /// The node ended it (reason, message): its phase is Failed.
    pub evicted: Option<(String, String)>,
    /// The grace its containers get when the node ended it for pressure (`None`: the
    /// pod's own).
    pub eviction_grace: Option<std::time::Duration>,
    /// A static pod its source no longer has, held while its containers stop: its
    /// status still goes to its mirror pod (which stays until then), and a new static
    /// pod of the same name waits. Not listed by [`StatusManager::pods`].
    pub retired: bool,
    /// The pod as it runs when a resize made it differ from `pod` (its allocation).
    pub allocated: Option<Arc<k8s::Pod>>,
    /// Where its in-place resize stands.
    pub resize: status::Resize,
    seq: u64,
}

/// The status manager.
#[derive(Debug, Default)]
pub struct StatusManager {
    pods: RwLock<(u64, BTreeMap<String, PodEntry>)>,
    /// Pods changed since last taken; `None` while nobody follows.
    changes: Mutex<Option<HashSet<String>>>,
    changed: Notify,
    /// Each listed pod's JSON as `GET /pods` last served it.
    listed: Mutex<HashMap<String, Listed>>,
}

/// A pod's JSON in the `GET /pods` body, valid while its entry holds this very pod
/// (kept here, so that its address is not reused) at this status version.
#[derive(Debug)]
struct Listed {
    pod: Arc<k8s::Pod>,
    version: u64,
    json: Arc<[u8]>,
}

/// The entries the node lists — not retired static pods, which are no longer its — in
/// the order they were added.
fn listed_in_order(pods: &BTreeMap<String, PodEntry>) -> Vec<&PodEntry> {
    let mut entries: Vec<&PodEntry> = pods.values().filter(|e| !e.retired).collect();
    entries.sort_by_key(|e| e.seq);
    entries
}

/// What a status update needs besides the pod's own entry.
pub struct Context<'a> {
    /// The runtime's name (container ID prefix).
    pub runtime_name: &'a str,
    /// The node's IP.
    pub host_ip: &'a str,
    /// Probe results by container id.
    pub probes: &'a dyn Fn(&str) -> ProbeView,
    /// Now, RFC 3339.
    pub now: &'a str,
}

impl StatusManager {
    /// An empty manager.
    pub fn new() -> Self {
        StatusManager::default()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, (u64, BTreeMap<String, PodEntry>)> {
        self.pods.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, (u64, BTreeMap<String, PodEntry>)> {
        self.pods.read().unwrap_or_else(|p| p.into_inner())
    }

    fn changes(&self) -> std::sync::MutexGuard<'_, Option<HashSet<String>>> {
        self.changes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that pod `uid` changed (its entry, its status or its removal).
    fn mark(&self, uid: &str) {
        if let Some(set) = self.changes().as_mut() {
            set.insert(uid.to_owned());
            self.changed.notify_one();
        }
    }

    /// Starts recording changes: from now on [`StatusManager::take_changes`] returns
    /// them. Every pod held so far counts as changed.
    pub fn follow(&self) {
        let held: HashSet<String> = self.read().1.keys().cloned().collect();
        *self.changes() = Some(held);
        self.changed.notify_one();
    }

    /// The pods changed since the last call (added, status changed, reclaimed or
    /// removed).
    pub fn take_changes(&self) -> Vec<String> {
        self.changes()
            .as_mut()
            .map(|set| set.drain().collect())
            .unwrap_or_default()
    }

    /// Waits until something changed since the last [`StatusManager::take_changes`].
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Adds a pod (Pending, no containers yet) or replaces its spec.
    pub fn set_pod(&self, pod: Arc<k8s::Pod>) {
        let uid = wasmlet_core::pod::uid(&pod).to_owned();
        let mut guard = self.write();
        let (seq, pods) = &mut *guard;
        match pods.get_mut(&uid) {
            Some(e) => {
                // A retired static pod whose manifest came back is wanted again.
                e.retired = false;
                e.pod = pod;
            }
            None => {
                *seq += 1;
                // A pod the API server says started already (before an agent restart)
                // keeps its start time, as with the kubelet: activeDeadlineSeconds
                // counts from it.
                let start_time = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .and_then(|t| serde_json::to_value(t).ok())
                    .and_then(|v| v.as_str().map(str::to_owned));
                pods.insert(
                    uid.clone(),
                    PodEntry {
                        pod,
                        status: k8s::PodStatus {
                            phase: Some("Pending".into()),
                            ..Default::default()
                        },
                        waiting: BTreeMap::new(),
                        start_time,
                        rejected: false,
                        seen: tokio::time::Instant::now(),
                        ran: false,
                        version: 0,
                        reclaimed: false,
                        first_synced: false,
                        evicted: None,
                        eviction_grace: None,
                        retired: false,
                        allocated: None,
                        resize: status::Resize::default(),
                        seq: *seq,
                    },
                );
            }
        }
        drop(guard);
        self.mark(&uid);
    }

    /// Records the pod as its allocation runs it (`None`: as its spec says) and why a
    /// resize it asks for waits.
    pub fn set_allocated(
        &self,
        uid: &str,
        allocated: Option<Arc<k8s::Pod>>,
        pending: Option<(String, String)>,
    ) {
        self.with_resize(uid, |e| {
            e.allocated = allocated;
            e.resize.pending = pending;
        });
    }

    /// Records whether the pod's resize is being applied (`Some(("", ""))`), failed
    /// (`Some(("Error", why))`) or done (`None`).
    pub fn set_resize_progress(&self, uid: &str, in_progress: Option<(String, String)>) {
        self.with_resize(uid, |e| e.resize.in_progress = in_progress);
    }

    /// Applies `change` to pod `uid`'s resize state; marks the pod when that changed.
    fn with_resize(&self, uid: &str, change: impl FnOnce(&mut PodEntry)) {
        let mut guard = self.write();
        let Some(e) = guard.1.get_mut(uid) else {
            return;
        };
        let before = (e.allocated.clone(), e.resize.clone());
        change(e);
        let changed = before.0.as_deref() != e.allocated.as_deref() || before.1 != e.resize;
        drop(guard);
        if changed {
            self.mark(uid);
        }
    }

    /// Records that admission refused the pod.
    pub fn reject(&self, pod: Arc<k8s::Pod>, reason: &str, message: &str, host_ip: &str) {
        self.set_pod(pod.clone());
        let mut guard = self.write();
        if let Some(e) = guard.1.get_mut(wasmlet_core::pod::uid(&pod)) {
            e.rejected = true;
            e.status = status::rejected(reason, message, host_ip);
            e.version += 1;
        }
        drop(guard);
        self.mark(wasmlet_core::pod::uid(&pod));
    }

    /// Records that the node ends the pod (activeDeadlineSeconds): from now on its phase
    /// is Failed with `reason` and `message`. False if it was so already.
    pub fn evict(&self, uid: &str, reason: &str, message: &str) -> bool {
        self.evict_with(uid, reason, message, None)
    }

    /// [`StatusManager::evict`] with the grace the pod's containers get (node-pressure
    /// eviction); `None` keeps the pod's own. False if the pod is unknown, ended by the
    /// node already, or finished.
    pub fn evict_with(
        &self,
        uid: &str,
        reason: &str,
        message: &str,
        grace: Option<std::time::Duration>,
    ) -> bool {
        match self.write().1.get_mut(uid) {
            Some(e)
                if e.evicted.is_none()
                    && !e.reclaimed
                    && !e.rejected
                    && !matches!(e.status.phase.as_deref(), Some("Succeeded" | "Failed")) =>
            {
                e.evicted = Some((reason.to_owned(), message.to_owned()));
                e.eviction_grace = grace;
                true
            }
            _ => false,
        }
    }

    /// Whether the node ended the pod, and the grace its containers get then.
    pub fn eviction(&self, uid: &str) -> Option<Option<std::time::Duration>> {
        let guard = self.read();
        let e = guard.1.get(uid)?;
        e.evicted.as_ref().map(|_| e.eviction_grace)
    }

    /// When the pod's `activeDeadlineSeconds` runs out, as Unix seconds: counted from its
    /// start time, the kubelet's way (`None`: no deadline, or not started yet).
    pub fn deadline(&self, uid: &str) -> Option<i64> {
        let guard = self.read();
        let e = guard.1.get(uid)?;
        let seconds = e.pod.spec.as_ref()?.active_deadline_seconds?;
        let start = crate::time::parse_rfc3339(e.start_time.as_deref()?)?;
        Some(start.saturating_add(seconds))
    }

    /// Forgets a pod.
    pub fn remove(&self, uid: &str) {
        self.write().1.remove(uid);
        self.mark(uid);
    }

    /// Keeps a static pod its source no longer has until its containers and sandbox
    /// are gone ([`StatusManager::reclaimed`] forgets it then), as the kubelet keeps its
    /// mirror pod until the static pod has terminated.
    pub fn retire(&self, uid: &str) {
        match self.write().1.get_mut(uid) {
            Some(e) => e.retired = true,
            None => return,
        }
        self.mark(uid);
    }

    /// Records that a deleted pod's containers and sandboxes are gone: its status is
    /// final from now on. A retired static pod is forgotten.
    pub fn reclaimed(&self, uid: &str) {
        let mut guard = self.write();
        match guard.1.get_mut(uid) {
            Some(e) if e.retired => {
                guard.1.remove(uid);
            }
            Some(e) => e.reclaimed = true,
            None => return,
        }
        drop(guard);
        self.mark(uid);
    }

    /// Whether a retired static pod named `namespace/name` other than `uid` is still
    /// stopping (a new static pod of that name waits for it).
    pub fn retiring(&self, full_name: &str, uid: &str) -> bool {
        self.read().1.iter().any(|(u, e)| {
            e.retired && u != uid && wasmlet_core::pod::PodKey::of(&e.pod).full_name() == full_name
        })
    }

    /// The `namespace/name` of every static pod held, retired ones included.
    pub fn static_names(&self) -> HashSet<String> {
        self.read()
            .1
            .values()
            .filter(|e| wasmlet_core::pod::is_static(&e.pod))
            .map(|e| wasmlet_core::pod::PodKey::of(&e.pod).full_name())
            .collect()
    }

    /// Records that the pod's first sync ran.
    pub fn first_sync_done(&self, uid: &str) {
        match self.write().1.get_mut(uid) {
            Some(e) if !e.first_synced => e.first_synced = true,
            _ => return,
        }
        self.mark(uid);
    }

    /// Sets or clears why a container waits; returns why it waited before.
    pub fn set_waiting(
        &self,
        uid: &str,
        container: &str,
        waiting: Option<Waiting>,
    ) -> Option<Waiting> {
        let mut guard = self.write();
        let e = guard.1.get_mut(uid)?;
        match waiting {
            Some(w) => e.waiting.insert(container.to_owned(), w),
            None => e.waiting.remove(container),
        }
    }

    /// Recomputes the pod's status from `runtime`; returns the new status (`None` for a
    /// pod it does not hold or one refused by admission) and, the first time the pod
    /// reports Running, how long after the agent first saw it.
    pub fn update(
        &self,
        uid: &str,
        runtime: &PodRuntime,
        ctx: &Context<'_>,
    ) -> Option<(k8s::PodStatus, Option<std::time::Duration>)> {
        let mut guard = self.write();
        let e = guard.1.get_mut(uid)?;
        if e.rejected || e.reclaimed {
            return None;
        }
        if e.start_time.is_none() {
            e.start_time = Some(ctx.now.to_owned());
        }
        let new = status::compute(&status::Input {
            pod: &e.pod,
            runtime,
            runtime_name: ctx.runtime_name,
            host_ip: ctx.host_ip,
            waiting: &e.waiting,
            probes: ctx.probes,
            start_time: e.start_time.as_deref(),
            previous: Some(&e.status),
            now: ctx.now,
            evicted: e.evicted.as_ref().map(|(r, m)| (r.as_str(), m.as_str())),
            // A grace of the node's own is the eviction manager's; a deadline keeps the
            // pod's.
            disruption: e.evicted.is_some() && e.eviction_grace.is_some(),
            // Static pods keep their phase (as the kubelet 1.33: its TODO #116484).
            terminal: wasmlet_core::pod::is_deleted(&e.pod)
                && !wasmlet_core::pod::is_static(&e.pod)
                && runtime.running().next().is_none(),
            allocated: e.allocated.as_deref(),
            resize: &e.resize,
        });
        let changed = e.status != new || e.version == 0;
        if changed {
            e.status = new.clone();
            e.version += 1;
        }
        let started = (!e.ran && new.phase.as_deref() == Some("Running")).then(|| {
            e.ran = true;
            e.seen.elapsed()
        });
        drop(guard);
        if changed {
            self.mark(uid);
        }
        Some((new, started))
    }

    /// The pod's entry.
    pub fn get(&self, uid: &str) -> Option<PodEntry> {
        self.read().1.get(uid).cloned()
    }

    /// The entry of the pod `namespace/name` (a pod deleted and made again under the
    /// same name: the newest).
    pub fn find(&self, namespace: &str, name: &str) -> Option<PodEntry> {
        let guard = self.read();
        guard
            .1
            .values()
            .filter(|e| {
                e.pod.metadata.name.as_deref() == Some(name)
                    && e.pod.metadata.namespace.as_deref().unwrap_or("default") == namespace
            })
            .max_by_key(|e| e.seq)
            .cloned()
    }

    /// Every pod with its status, in the order they were added (retired static pods
    /// are no longer the node's).
    pub fn pods(&self) -> Vec<k8s::Pod> {
        let guard = self.read();
        listed_in_order(&guard.1)
            .into_iter()
            .map(|e| {
                let mut p = (*e.pod).clone();
                p.status = Some(e.status.clone());
                p
            })
            .collect()
    }

    /// The UIDs of every pod held.
    pub fn uids(&self) -> Vec<String> {
        self.read().1.keys().cloned().collect()
    }

    /// The pods as a v1 PodList (`GET /pods`), serialized, in the order they were
    /// added. Each pod's JSON is kept until its spec or status changes: a poll of a
    /// node where nothing changed serializes no pod, and the entries are read under the
    /// lock without copying a pod whose JSON is kept.
    pub fn pod_list_json(&self) -> Vec<u8> {
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        // Per pod: its uid, the pod, its status version, and its status when its JSON
        // is not kept.
        let wanted: Vec<(String, Arc<k8s::Pod>, u64, Option<k8s::PodStatus>)> = {
            let guard = self.read();
            listed_in_order(&guard.1)
                .into_iter()
                .map(|e| {
                    let uid = wasmlet_core::pod::uid(&e.pod).to_owned();
                    let kept = listed
                        .get(&uid)
                        .is_some_and(|l| Arc::ptr_eq(&l.pod, &e.pod) && l.version == e.version);
                    let status = (!kept).then(|| e.status.clone());
                    (uid, e.pod.clone(), e.version, status)
                })
                .collect()
        };
        let mut body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":["#.to_vec();
        let mut now_listed = HashMap::with_capacity(wanted.len());
        for (i, (uid, pod, version, status)) in wanted.into_iter().enumerate() {
            let json = match (status, listed.remove(&uid)) {
                (None, Some(kept)) => kept.json,
                (status, _) => {
                    let mut p = (*pod).clone();
                    p.status = status;
                    // k8s-openapi writes a Pod's `apiVersion` and `kind` itself.
                    Arc::from(serde_json::to_vec(&p).unwrap_or_default())
                }
            };
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(&json);
            now_listed.insert(uid, Listed { pod, version, json });
        }
        body.extend_from_slice(b"]}");
        *listed = now_listed;
        body
    }

    /// How many pods are held.
    pub fn len(&self) -> usize {
        self.read().1.len()
    }

    /// Whether no pod is held.
    pub fn is_empty(&self) -> bool {
        self.read().1.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmlet_core::runtime::{ContainerInfo, Sandbox, State};

    fn pod() -> Arc<k8s::Pod> {
        Arc::new(
            serde_json::from_str(
                r#"{"metadata":{"name":"p","namespace":"default","uid":"u1"},
                "spec":{"containers":[{"name":"c","image":"i"}]}}"#,
            )
            .expect("pod"),
        )
    }

    fn runtime(state: Option<State>) -> PodRuntime {
        PodRuntime {
            uid: "u1".into(),
            sandboxes: vec![Sandbox {
                id: "s".into(),
                ready: true,
                ips: vec!["10.0.0.2".into()],
                ..Default::default()
            }],
            containers: state
                .map(|state| ContainerInfo {
                    id: "c1".into(),
                    name: "c".into(),
                    sandbox_id: "s".into(),
                    state,
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    fn update(m: &StatusManager, rt: &PodRuntime) -> Option<k8s::PodStatus> {
        let probes = |_: &str| ProbeView::default();
        m.update(
            "u1",
            rt,
            &Context {
                runtime_name: "sim",
                host_ip: "192.168.0.1",
                probes: &probes,
                now: "2026-11-22T10:00:00Z",
            },
        )
        .map(|(s, _)| s)
    }

    /// The `GET /pods` body as a JSON value.
    fn listed(m: &StatusManager) -> serde_json::Value {
        serde_json::from_slice(&m.pod_list_json()).expect("a JSON body")
    }

    #[test]
    fn the_pod_list_follows_every_change_of_spec_status_and_membership() {
        let m = StatusManager::new();
        assert_eq!(
            listed(&m),
            serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []})
        );
        m.set_pod(pod());
        let second: Arc<k8s::Pod> = Arc::new(
            serde_json::from_str(
                r#"{"metadata":{"name":"q","namespace":"default","uid":"u2"},
                "spec":{"containers":[{"name":"c","image":"i"}]}}"#,
            )
            .expect("pod"),
        );
        m.set_pod(second);
        let body = listed(&m);
        let items = body["items"].as_array().expect("items");
        let names: Vec<&str> = items
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(names, ["p", "q"], "in the order they were added");
        for item in items {
            assert_eq!(
                (item["kind"].as_str(), item["apiVersion"].as_str()),
                (Some("Pod"), Some("v1"))
            );
            assert_eq!(item["status"]["phase"], "Pending");
        }
        // Unchanged: the same body again.
        assert_eq!(m.pod_list_json(), m.pod_list_json());
        // A status change reaches the list.
        update(&m, &runtime(Some(State::Running)));
        let body = listed(&m);
        assert_eq!(body["items"][0]["status"]["phase"], "Running");
        assert_eq!(body["items"][1]["status"]["phase"], "Pending");
        // So does a new spec at the same status version.
        let mut relabelled = (*pod()).clone();
        relabelled.metadata.labels = Some([("tier".to_owned(), "web".to_owned())].into());
        m.set_pod(Arc::new(relabelled));
        let body = listed(&m);
        assert_eq!(body["items"][0]["metadata"]["labels"]["tier"], "web");
        assert_eq!(body["items"][0]["status"]["phase"], "Running");
        // And a removal.
        m.remove("u1");
        let body = listed(&m);
        let names: Vec<&str> = body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(names, ["q"]);
    }

    #[test]
    fn versions_rise_on_change_only_and_followers_see_each_pod_once() {
        let m = StatusManager::new();
        m.set_pod(pod());
        assert!(m.take_changes().is_empty(), "nobody follows yet");
        m.follow();
        assert_eq!(m.take_changes(), ["u1"], "what is held counts as changed");
        assert_eq!(
            m.get("u1").expect("held").version,
            0,
            "no status computed yet"
        );
        let running = runtime(Some(State::Running));
        update(&m, &running);
        update(&m, &running);
        assert_eq!(
            m.get("u1").expect("held").version,
            1,
            "the same status twice"
        );
        update(&m, &runtime(Some(State::Exited)));
        assert_eq!(m.get("u1").expect("held").version, 2);
        assert_eq!(m.take_changes(), ["u1"], "coalesced");
        assert!(m.take_changes().is_empty());
        m.remove("u1");
        assert_eq!(m.take_changes(), ["u1"], "a removal is a change too");
    }

    #[test]
    fn a_reclaimed_pod_keeps_its_last_status() {
        let m = StatusManager::new();
        m.set_pod(pod());
        update(&m, &runtime(Some(State::Exited)));
        let last = m.get("u1").expect("held");
        m.reclaimed("u1");
        // Its containers are removed: recomputing now would say ContainerCreating.
        assert_eq!(update(&m, &runtime(None)), None);
        let after = m.get("u1").expect("held");
        assert!(after.reclaimed);
        assert_eq!(after.status, last.status);
        assert_eq!(after.version, last.version);
    }

    #[test]
    fn a_retired_static_pod_is_held_until_reclaimed_unless_it_comes_back() {
        let m = StatusManager::new();
        let mut p = (*pod()).clone();
        p.metadata.annotations = Some(
            [(
                wasmlet_core::pod::CONFIG_SOURCE_ANNOTATION.to_owned(),
                "file".to_owned(),
            )]
            .into(),
        );
        let p = Arc::new(p);
        m.set_pod(p.clone());
        m.retire("u1");
        assert!(m.pods().is_empty(), "no longer the node's");
        assert!(m.retiring("default/p", "u2"), "a new version waits");
        assert!(!m.retiring("default/p", "u1"));
        assert!(
            m.static_names().contains("default/p"),
            "its mirror pod stays"
        );
        m.set_pod(p);
        assert_eq!(m.pods().len(), 1, "back under the same UID");
        assert!(!m.retiring("default/p", "u2"));
        m.retire("u1");
        m.reclaimed("u1");
        assert!(m.get("u1").is_none(), "stopped: forgotten");
        assert!(m.static_names().is_empty());
    }
}
