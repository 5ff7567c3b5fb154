//! PLEG, the pod lifecycle event generator: it relists the runtime (ListPodSandbox +
//! ListContainers) every second — or at once when the runtime's event stream says
//! something happened — compares each container's state with the last relist, turns
//! the differences into events (ContainerStarted, ContainerDied, ContainerRemoved,
//! ContainerChanged) and refreshes the pod cache for the pods that changed.
//!
//! Events go through an [`EventQueue`] that coalesces per pod (see [`crate::queue`]), so
//! the queue is bounded by the number of pods and nothing is dropped silently.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use wasmlet_cri::proto::{self, ContainerFilter, PodSandboxFilter};
use wasmlet_cri::{CriRuntime, ErrorKind};

use crate::cache::PodCache;
use crate::queue::PodQueue;
use crate::runtime::{
    self, ContainerInfo, NODE_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
    PodRuntime, Sandbox, State,
};

/// How often the runtime is relisted.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// PLEG is unhealthy when the last relist is older than this.
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);

/// What happened to a container (or a sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// It runs.
    ContainerStarted,
    /// It exited.
    ContainerDied,
    /// It is gone from the runtime.
    ContainerRemoved,
    /// It changed to a state other than the above (created, unknown).
    ContainerChanged,
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlegEvent {
    /// The pod's UID.
    pub uid: String,
    /// What happened.
    pub kind: EventKind,
    /// The container's (or sandbox's) id.
    pub id: String,
}

/// PLEG's events, queued per pod for the syncLoop.
pub type EventQueue = PodQueue<PlegEvent>;

/// A container's or sandbox's state as PLEG compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlegState {
    Running,
    Exited,
    Unknown,
}

fn container_state(s: State) -> PlegState {
    match s {
        State::Running => PlegState::Running,
        State::Exited => PlegState::Exited,
        State::Created | State::Unknown => PlegState::Unknown,
    }
}

/// The kubelet's generateEvents: what a change from `old` to `new` (`None`: not in the
/// runtime) means.
fn generate_events(
    uid: &str,
    id: &str,
    old: Option<PlegState>,
    new: Option<PlegState>,
) -> Vec<PlegEvent> {
    if old == new {
        return Vec::new();
    }
    let event = |kind| PlegEvent {
        uid: uid.to_owned(),
        kind,
        id: id.to_owned(),
    };
    match new {
        Some(PlegState::Running) => vec![event(EventKind::ContainerStarted)],
        Some(PlegState::Exited) => vec![event(EventKind::ContainerDied)],
        Some(PlegState::Unknown) => vec![event(EventKind::ContainerChanged)],
        None => match old {
            Some(PlegState::Exited) => vec![event(EventKind::ContainerRemoved)],
            _ => vec![
                event(EventKind::ContainerDied),
                event(EventKind::ContainerRemoved),
            ],
        },
    }
}

/// Reads a pod's runtime view from listed sandboxes and containers, calling
/// PodSandboxStatus and ContainerStatus only for what `previous` does not already know
/// (a new or changed object).
pub async fn build<R: CriRuntime>(
    runtime: &R,
    uid: &str,
    sandboxes: &[&proto::PodSandbox],
    containers: &[&proto::Container],
    previous: Option<&PodRuntime>,
) -> PodRuntime {
    let labels = sandboxes
        .first()
        .map(|s| &s.labels)
        .or_else(|| containers.first().map(|c| &c.labels));
    let label = |k: &str| labels.and_then(|l| l.get(k).cloned()).unwrap_or_default();
    let mut pod = PodRuntime {
        uid: uid.to_owned(),
        name: label(POD_NAME_LABEL),
        namespace: label(POD_NAMESPACE_LABEL),
        ..Default::default()
    };
    for s in sandboxes {
        let mut sandbox: Sandbox = runtime::sandbox_from_list(s);
        let known = previous
            .and_then(|p| p.sandboxes.iter().find(|o| o.id == s.id))
            .filter(|o| o.ready == sandbox.ready);
        match known {
            Some(o) => sandbox.ips = o.ips.clone(),
            None if sandbox.ready && !sandbox.host_network => {
                if let Ok(st) = runtime.pod_sandbox_status(&s.id, false).await
                    && let Some(status) = st.status
                {
                    sandbox.ips = runtime::sandbox_from_status(&status).ips;
                }
            }
            None => {}
        }
        pod.sandboxes.push(sandbox);
    }
    for c in containers {
        let mut info: ContainerInfo = runtime::container_from_list(c);
        let known = previous
            .and_then(|p| p.containers.iter().find(|o| o.id == c.id))
            .filter(|o| o.detailed && o.state == info.state);
        match known {
            Some(o) => info = o.clone(),
            None => match runtime.container_status(&c.id, false).await {
                Ok(st) => {
                    if let Some(st) = st.status {
                        runtime::add_status(&mut info, &st);
                    }
                }
                // Removed between the list and now: leave it out.
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(_) => {}
            },
        }
        pod.containers.push(info);
    }
    pod.sort();
    pod
}

/// Reads one pod's runtime view afresh (a worker does this after changing it).
pub async fn inspect<R: CriRuntime>(
    runtime: &R,
    node: &str,
    uid: &str,
    previous: Option<&PodRuntime>,
) -> wasmlet_cri::runtime::Result<PodRuntime> {
    let selector: std::collections::BTreeMap<String, String> = [
        (NODE_LABEL.to_owned(), node.to_owned()),
        (POD_UID_LABEL.to_owned(), uid.to_owned()),
    ]
    .into_iter()
    .collect();
    let sandboxes = runtime
        .list_pod_sandbox(Some(PodSandboxFilter {
            label_selector: selector.clone(),
            ..Default::default()
        }))
        .await?;
    let containers = runtime
        .list_containers(Some(ContainerFilter {
            label_selector: selector,
            ..Default::default()
        }))
        .await?;
    let s: Vec<&proto::PodSandbox> = sandboxes.iter().collect();
    let c: Vec<&proto::Container> = containers.iter().collect();
    Ok(build(runtime, uid, &s, &c, previous).await)
}

/// PLEG's health: when the last relist finished.
#[derive(Debug)]
pub struct Health {
    last: Mutex<Option<Instant>>,
    started: Instant,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            last: Mutex::new(None),
            started: Instant::now(),
        }
    }
}

impl Health {
    /// Records a relist that finished now.
    pub fn relisted(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// `Ok` while the last relist (or the start, before the first) is within the
    /// threshold; otherwise the kubelet's message.
    pub fn check(&self) -> Result<(), String> {
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        let since = Instant::now().saturating_duration_since(last.unwrap_or(self.started));
        if since > RELIST_THRESHOLD {
            Err(format!(
                "PLEG is not healthy: pleg was last seen active {since:.1?} ago; threshold is {RELIST_THRESHOLD:?}"
            ))
        } else {
            Ok(())
        }
    }

    /// Whether a relist has finished yet.
    pub fn has_relisted(&self) -> bool {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

/// The relisting generator.
pub struct Pleg<R> {
    runtime: Arc<R>,
    node: String,
    cache: Arc<PodCache>,
    queue: Arc<EventQueue>,
    health: Arc<Health>,
    record: HashMap<String, (String, PlegState)>,
}

/// What one relist saw and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelistStats {
    /// Pods listed.
    pub pods: usize,
    /// Containers listed.
    pub containers: usize,
    /// Events generated.
    pub events: usize,
}

impl<R: CriRuntime + 'static> Pleg<R> {
    /// A PLEG for the objects labelled with `node`.
    pub fn new(
        runtime: Arc<R>,
        node: &str,
        cache: Arc<PodCache>,
        queue: Arc<EventQueue>,
        health: Arc<Health>,
    ) -> Self {
        Pleg {
            runtime,
            node: node.to_owned(),
            cache,
            queue,
            health,
            record: HashMap::new(),
        }
    }

    /// One relist.
    pub async fn relist(&mut self) -> wasmlet_cri::runtime::Result<RelistStats> {
        let observed = Instant::now();
        // Unfiltered lists, filtered here: a runtime answers them from what it keeps
        // encoded (the simulator) or in one pass, while a label selector makes it match
        // every object's labels; objects of other nodes are rare.
        let sandboxes = self.runtime.list_pod_sandbox(None).await?;
        let containers = self.runtime.list_containers(None).await?;
        let ours = |labels: &std::collections::BTreeMap<String, String>| {
            labels.get(NODE_LABEL).is_some_and(|n| *n == self.node)
        };
        type Group<'a> = (Vec<&'a proto::PodSandbox>, Vec<&'a proto::Container>);
        let mut pods: HashMap<&str, Group<'_>> = HashMap::new();
        let mut record = HashMap::with_capacity(sandboxes.len() + containers.len());
        for s in sandboxes.iter().filter(|s| ours(&s.labels)) {
            let Some(uid) = s.labels.get(POD_UID_LABEL) else {
                continue;
            };
            pods.entry(uid).or_default().0.push(s);
            let state = if s.state == proto::PodSandboxState::SandboxReady as i32 {
                PlegState::Running
            } else {
                PlegState::Exited
            };
            record.insert(s.id.clone(), (uid.clone(), state));
        }
        for c in containers.iter().filter(|c| ours(&c.labels)) {
            let Some(uid) = c.labels.get(POD_UID_LABEL) else {
                continue;
            };
            pods.entry(uid).or_default().1.push(c);
            record.insert(
                c.id.clone(),
                (uid.clone(), container_state(State::from_cri(c.state))),
            );
        }
        let mut events = Vec::new();
        for (id, (uid, state)) in &record {
            let old = self.record.get(id).map(|(_, s)| *s);
            events.extend(generate_events(uid, id, old, Some(*state)));
        }
        for (id, (uid, old)) in &self.record {
            if !record.contains_key(id) {
                events.extend(generate_events(uid, id, Some(*old), None));
            }
        }
        let changed: HashSet<&str> = events.iter().map(|e| e.uid.as_str()).collect();
        for (uid, (s, c)) in &pods {
            let previous = self.cache.get(uid);
            if !changed.contains(uid) && previous.is_some() {
                continue;
            }
            let rt = build(&*self.runtime, uid, s, c, previous.as_deref()).await;
            self.cache.set(rt, observed);
        }
        for uid in self.cache.uids() {
            if !pods.contains_key(uid.as_str()) {
                self.cache.remove(&uid, observed);
            }
        }
        let stats = RelistStats {
            pods: pods.len(),
            containers: pods.values().map(|(_, c)| c.len()).sum(),
            events: events.len(),
        };
        self.record = record;
        for e in events {
            self.queue.push(&e.uid.clone(), e);
        }
        self.health.relisted();
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_events_follows_the_kubelet() {
        use EventKind::*;
        use PlegState::*;
        let kinds = |old, new| -> Vec<EventKind> {
            generate_events("u", "c", old, new)
                .into_iter()
                .map(|e| e.kind)
                .collect()
        };
        assert_eq!(kinds(None, Some(Running)), [ContainerStarted]);
        assert_eq!(kinds(Some(Running), Some(Exited)), [ContainerDied]);
        assert_eq!(kinds(None, Some(Exited)), [ContainerDied]);
        assert_eq!(kinds(Some(Exited), None), [ContainerRemoved]);
        assert_eq!(
            kinds(Some(Running), None),
            [ContainerDied, ContainerRemoved]
        );
        assert_eq!(kinds(None, Some(Unknown)), [ContainerChanged]);
        assert!(kinds(Some(Running), Some(Running)).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn health_turns_after_three_minutes_without_a_relist() {
        let h = Health::default();
        assert!(h.check().is_ok());
        h.relisted();
        tokio::time::advance(Duration::from_secs(181)).await;
        let err = h.check().expect_err("stale");
        assert!(err.starts_with("PLEG is not healthy"), "{err}");
        h.relisted();
        assert!(h.check().is_ok());
    }
}
