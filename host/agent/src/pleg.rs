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
use wasmlet_cri::listed::{self, ListedContainer, ListedSandbox};
use wasmlet_cri::proto::{self, ContainerFilter, PodSandboxFilter};
use wasmlet_cri::{CriRuntime, ErrorKind};

use crate::cache::PodCache;
use crate::queue::PodQueue;
use wasmlet_core::runtime::{
    self, CONTAINER_NAME_LABEL, ContainerInfo, NODE_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL,
    POD_UID_LABEL, PodRuntime, Sandbox, State,
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

/// Builds pod `uid`'s runtime view from its listed sandboxes and containers.
///
/// A list says little (id, state, labels); the rest comes from `PodSandboxStatus` /
/// `ContainerStatus`, asked only for objects that are new or whose state changed since
/// `previous` — the others are taken from it as they were.
pub async fn build<R: CriRuntime>(
    runtime: &R,
    uid: &str,
    sandboxes: &[&ListedSandbox],
    containers: &[&ListedContainer],
    previous: Option<&PodRuntime>,
) -> PodRuntime {
    let labels = sandboxes
        .first()
        .map(|s| &s.labels[..])
        .or_else(|| containers.first().map(|c| &c.labels[..]))
        .unwrap_or_default();
    let label = |k: &str| listed::label(labels, k).unwrap_or_default().to_owned();
    let mut pod = PodRuntime {
        uid: uid.to_owned(),
        name: label(POD_NAME_LABEL),
        namespace: label(POD_NAMESPACE_LABEL),
        ..Default::default()
    };
    for s in sandboxes {
        let known = previous.and_then(|p| p.sandboxes.iter().find(|o| o.id == listed::text(&s.id)));
        if let Some(sandbox) = sandbox_view(runtime, s, known).await {
            pod.sandboxes.push(sandbox);
        }
    }
    for c in containers {
        let known =
            previous.and_then(|p| p.containers.iter().find(|o| o.id == listed::text(&c.id)));
        if let Some(info) = container_view(runtime, c, known).await {
            pod.containers.push(info);
        }
    }
    pod.sort();
    pod
}

/// A listed sandbox as the pod's view has it: `known` again if its readiness is
/// unchanged, else its status read; `None` if it is gone.
async fn sandbox_view<R: CriRuntime>(
    runtime: &R,
    s: &ListedSandbox,
    known: Option<&Sandbox>,
) -> Option<Sandbox> {
    let id = listed::text(&s.id);
    let ready = s.state == proto::PodSandboxState::SandboxReady as i32;
    if let Some(o) = known.filter(|o| o.ready == ready) {
        return Some(o.clone());
    }
    match runtime.pod_sandbox_status(id, false).await {
        Ok(st) => st
            .status
            .map(|status| runtime::sandbox_from_status(&status)),
        // Removed between the list and now: leave it out.
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        // Unreadable for now: what is known, with the listed state.
        Err(_) => Some(Sandbox {
            ready,
            ..known.cloned().unwrap_or_else(|| Sandbox {
                id: id.to_owned(),
                created_at: s.created_at,
                ..Default::default()
            })
        }),
    }
}

/// A listed container as the pod's view has it: `known` again if it was read in
/// detail and its state is unchanged, else its status read; `None` if it is gone.
async fn container_view<R: CriRuntime>(
    runtime: &R,
    c: &ListedContainer,
    known: Option<&ContainerInfo>,
) -> Option<ContainerInfo> {
    let id = listed::text(&c.id);
    let state = State::from_cri(c.state);
    if let Some(o) = known.filter(|o| o.detailed && o.state == state) {
        return Some(o.clone());
    }
    let sandbox_id = listed::text(&c.pod_sandbox_id);
    match runtime.container_status(id, false).await {
        Ok(st) => st
            .status
            .map(|status| crate::termination::observed(&status, sandbox_id)),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(_) => Some(ContainerInfo {
            state,
            detailed: false,
            ..known.cloned().unwrap_or_else(|| ContainerInfo {
                id: id.to_owned(),
                sandbox_id: sandbox_id.to_owned(),
                name: listed::label(&c.labels, CONTAINER_NAME_LABEL)
                    .unwrap_or_default()
                    .to_owned(),
                state,
                created_at: c.created_at,
                ..Default::default()
            })
        }),
    }
}

/// Reads one pod's runtime view afresh (a worker does this after changing it).
pub async fn inspect<R: CriRuntime>(
    runtime: &R,
    node: &str,
    uid: &str,
    previous: Option<&PodRuntime>,
) -> wasmlet_cri::runtime::Result<PodRuntime> {
    // By UID only: the kubelet's objects (adopted) carry no node label.
    let selector: std::collections::BTreeMap<String, String> =
        [(POD_UID_LABEL.to_owned(), uid.to_owned())].into();
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
    let sandboxes: Vec<ListedSandbox> = sandboxes.iter().map(ListedSandbox::from).collect();
    let containers: Vec<ListedContainer> = containers.iter().map(ListedContainer::from).collect();
    let s: Vec<&ListedSandbox> = sandboxes
        .iter()
        .filter(|s| pod_of(&s.labels, node).is_some())
        .collect();
    let c: Vec<&ListedContainer> = containers
        .iter()
        .filter(|c| pod_of(&c.labels, node).is_some())
        .collect();
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

/// PLEG has not relisted within [`RELIST_THRESHOLD`]: the node is not ready.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "PLEG is not healthy: pleg was last seen active {since:.1?} ago; threshold is {RELIST_THRESHOLD:?}"
)]
pub struct PlegUnhealthy {
    /// How long ago the last relist finished (or the agent started).
    pub since: Duration,
}

impl Health {
    /// Records a relist that finished now.
    pub fn relisted(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// `Ok` while the last relist (or the start, before the first) is within the
    /// threshold; otherwise the kubelet's message.
    pub fn check(&self) -> Result<(), PlegUnhealthy> {
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        let since = Instant::now().saturating_duration_since(last.unwrap_or(self.started));
        if since > RELIST_THRESHOLD {
            Err(PlegUnhealthy { since })
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

/// The UID of the pod an object listed with `labels` belongs to, when it is `node`'s:
/// made by this node's agent, or by the kubelet (a pod's labels and no node label) —
/// adopted, as the kubelet adopts wasmlet's, so that either can take over a node
/// without restarting its pods.
fn pod_of<'a>(labels: &'a [listed::Label], node: &str) -> Option<&'a str> {
    match listed::label(labels, NODE_LABEL) {
        Some(owner) if owner != node => None,
        _ => listed::label(labels, POD_UID_LABEL),
    }
}

/// The relisting generator.
pub struct Pleg<R> {
    runtime: Arc<R>,
    node: String,
    cache: Arc<PodCache>,
    queue: Arc<EventQueue>,
    health: Arc<Health>,
    record: HashMap<String, Recorded>,
    generation: u64,
}

/// What the last relists saw of one container or sandbox.
struct Recorded {
    uid: String,
    state: PlegState,
    /// The relist that last listed it.
    generation: u64,
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
            generation: 0,
        }
    }

    /// One relist.
    ///
    /// On an unchanged node it allocates next to nothing beyond the two lists: the
    /// record of the last relist is updated in place (marked with this relist's
    /// generation), and pods are grouped only when something of theirs changed.
    pub async fn relist(&mut self) -> wasmlet_cri::runtime::Result<RelistStats> {
        let observed = Instant::now();
        // Both lists at once, unfiltered and read leanly (ids, states, labels): a
        // runtime answers an unfiltered list in one pass, while a label selector makes it
        // match every object's labels; objects of other nodes are rare.
        let (sandboxes, containers) = tokio::join!(
            self.runtime.list_pod_sandbox_lean(),
            self.runtime.list_containers_lean()
        );
        let (sandboxes, containers) = (sandboxes?, containers?);
        let node = self.node.as_str();
        let ours = |labels| pod_of(labels, node);
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let mut events = Vec::new();
        let mut seen: HashSet<&str> = HashSet::with_capacity(sandboxes.len());
        let mut count = 0;
        let listed = sandboxes
            .iter()
            .filter_map(|s| {
                let state = if s.state == proto::PodSandboxState::SandboxReady as i32 {
                    PlegState::Running
                } else {
                    PlegState::Exited
                };
                ours(&s.labels).map(|uid| (uid, listed::text(&s.id), state, false))
            })
            .chain(containers.iter().filter_map(|c| {
                let state = container_state(State::from_cri(c.state));
                ours(&c.labels).map(|uid| (uid, listed::text(&c.id), state, true))
            }));
        for (uid, id, state, container) in listed {
            seen.insert(uid);
            count += usize::from(container);
            let old = record(&mut self.record, (uid, id), state, generation);
            events.extend(generate_events(uid, id, old, Some(state)));
        }
        self.record.retain(|id, r| {
            let listed = r.generation == generation;
            if !listed {
                events.extend(generate_events(&r.uid, id, Some(r.state), None));
            }
            listed
        });
        let stale: HashSet<&str> = events
            .iter()
            .map(|e| e.uid.as_str())
            .chain(seen.iter().copied().filter(|uid| !self.cache.contains(uid)))
            .collect();
        if !stale.is_empty() {
            let stale = group(&sandboxes, &containers, |labels| {
                ours(labels).filter(|u| stale.contains(u))
            });
            for (uid, (s, c)) in &stale {
                let previous = self.cache.get(uid);
                let rt = build(&*self.runtime, uid, s, c, previous.as_deref()).await;
                self.cache.set(rt, observed);
            }
        }
        self.cache.remove_unless(|uid| seen.contains(uid), observed);
        let stats = RelistStats {
            pods: seen.len(),
            containers: count,
            events: events.len(),
        };
        drop((seen, stale));
        for e in events {
            self.queue.push(&e.uid.clone(), e);
        }
        self.health.relisted();
        Ok(stats)
    }
}

/// Marks `id` (of pod `uid`) as listed in this relist's `generation` with `state`, and
/// returns the state the last relist saw it in (`None`: new).
fn record(
    record: &mut HashMap<String, Recorded>,
    (uid, id): (&str, &str),
    state: PlegState,
    generation: u64,
) -> Option<PlegState> {
    if let Some(entry) = record.get_mut(id) {
        entry.generation = generation;
        return Some(std::mem::replace(&mut entry.state, state));
    }
    record.insert(
        id.to_owned(),
        Recorded {
            uid: uid.to_owned(),
            state,
            generation,
        },
    );
    None
}

/// A pod's listed sandboxes and containers.
type Group<'a> = (Vec<&'a ListedSandbox>, Vec<&'a ListedContainer>);

/// The listed sandboxes and containers of the pods `pick` names (from their labels),
/// grouped by pod.
fn group<'a>(
    sandboxes: &'a [ListedSandbox],
    containers: &'a [ListedContainer],
    pick: impl Fn(&'a [listed::Label]) -> Option<&'a str>,
) -> HashMap<&'a str, Group<'a>> {
    let mut pods: HashMap<&str, Group<'_>> = HashMap::new();
    for s in sandboxes {
        if let Some(uid) = pick(&s.labels) {
            pods.entry(uid).or_default().0.push(s);
        }
    }
    for c in containers {
        if let Some(uid) = pick(&c.labels) {
            pods.entry(uid).or_default().1.push(c);
        }
    }
    pods
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
        assert!(err.since >= Duration::from_secs(181), "{err}");
        assert!(err.to_string().starts_with("PLEG is not healthy"), "{err}");
        h.relisted();
        assert!(h.check().is_ok());
    }
}
