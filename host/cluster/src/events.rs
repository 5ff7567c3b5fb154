//! Events to the API server: what `kubectl describe pod` lists under Events.
//!
//! [`ApiRecorder`] takes the agent's events without ever blocking it (a full queue
//! drops the event, counted, as the kubelet's broadcaster drops it); [`run`] writes them
//! as core/v1 Events from `kubelet` on this node. A repeat of an event (same pod,
//! container, reason and message) raises the first one's `count` and `lastTimestamp`
//! with a PATCH instead of adding another object. Writes are rate limited
//! (eventRecordQPS / eventBurst).
//!
//! No event can hold up another, as with client-go's recorder: one the API server
//! rejects (a 4xx — its namespace deleted or terminating, forbidden, invalid) is dropped
//! at once, never retried; one that fails for a passing reason (the API server away, a
//! 5xx, 429) is set aside and tried again [`RETRY_SLEEP`] later, up to [`MAX_TRIES`]
//! times, while the events behind it go on. A namespace that answered that it is
//! deleted or being deleted has its events dropped without asking for
//! [`NAMESPACE_GONE`], so that a deleted namespace's burst does not spend everyone
//! else's rate limit. What is dropped is counted
//! (`wasmlet_events_dropped_total` by reason). The writer lets a burst gather for
//! [`GATHER`] before it writes: events are for people reading later, and a burst of pod
//! starts gets its status patches out first. Each event keeps the time it was recorded.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use wasmlet_agent::events::{Event, Recorder};

use crate::ratelimit::RateLimiter;

/// How many events wait at most (and how many wait to be tried again); beyond that
/// they are dropped.
pub const QUEUE: usize = 1000;
/// How many times one event is tried (the kubelet's maxTriesPerEvent).
pub const MAX_TRIES: u32 = 12;
/// The wait between two tries.
pub const RETRY_SLEEP: Duration = Duration::from_secs(10);
/// How long a burst of events gathers before it is written.
pub const GATHER: Duration = Duration::from_millis(100);
/// How long a namespace that answered that it is gone or going (404 for the namespace,
/// 403 `NamespaceTerminating`) has its events dropped without asking again: a deleted
/// namespace's pods stop with a burst of events that would otherwise spend the rate
/// limit of everyone else's.
pub const NAMESPACE_GONE: Duration = Duration::from_secs(10);
/// How many distinct events are remembered for counting repeats.
const REMEMBERED: usize = 4096;

/// Why an event was dropped.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Dropped {
    reason: &'static str,
}

/// What happened to the events: written, or dropped by reason (`queue_full`,
/// `rejected`: a 4xx from the API server, `retries`: [`MAX_TRIES`] transient failures).
#[derive(Debug, Default)]
pub struct EventStats {
    written: Counter,
    dropped: Family<Dropped, Counter>,
}

impl EventStats {
    /// Events stored by the API server.
    pub fn written(&self) -> u64 {
        self.written.get()
    }

    /// Events dropped for `reason` (`queue_full`, `rejected`, `retries`).
    pub fn dropped(&self, reason: &'static str) -> u64 {
        self.dropped.get_or_create(&Dropped { reason }).get()
    }

    fn drop_one(&self, reason: &'static str) {
        self.dropped.get_or_create(&Dropped { reason }).inc();
    }
}

/// The agent's side: queues events for [`run`].
#[derive(Debug)]
pub struct ApiRecorder {
    queue: mpsc::Sender<Event>,
    stats: Arc<EventStats>,
}

/// The writer's side: the queue and the counts it keeps.
#[derive(Debug)]
pub struct EventQueue {
    events: mpsc::Receiver<Event>,
    stats: Arc<EventStats>,
}

impl ApiRecorder {
    /// A recorder and the queue [`run`] takes.
    pub fn new() -> (Arc<Self>, EventQueue) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let stats = Arc::new(EventStats::default());
        (
            Arc::new(ApiRecorder {
                queue: tx,
                stats: stats.clone(),
            }),
            EventQueue { events: rx, stats },
        )
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.stats.dropped("queue_full")
    }

    /// What happened to the events.
    pub fn stats(&self) -> Arc<EventStats> {
        self.stats.clone()
    }

    /// Registers `wasmlet_events_written_total` and `wasmlet_events_dropped_total`.
    pub fn register(&self, registry: &mut Registry) {
        let own = registry.sub_registry_with_prefix("wasmlet");
        own.register(
            "events_written",
            "Events the API server stored (new ones and repeats)",
            self.stats.written.clone(),
        );
        own.register(
            "events_dropped",
            "Events dropped, by reason: queue_full, rejected (a 4xx from the API server), retries (too many transient failures)",
            self.stats.dropped.clone(),
        );
    }
}

impl Recorder for ApiRecorder {
    fn record(&self, event: Event) {
        if self.queue.try_send(event).is_err() {
            self.stats.drop_one("queue_full");
        }
    }
}

/// What makes two events the same one, repeated.
type Key = (String, String, String, Option<String>, String, String);

fn key(e: &Event) -> Key {
    (
        e.pod.namespace.clone(),
        e.pod.name.clone(),
        e.pod.uid.clone(),
        e.field_path.clone(),
        e.reason.clone(),
        e.message.clone(),
    )
}

fn time(at: std::time::SystemTime) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::try_from(at)
            .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now()),
    )
}

/// The Event object for `e`, from `kubelet` on `node` (or from the controller that
/// reports an event about another object).
pub fn object(e: &Event, node: &str) -> k8s::Event {
    let nanos = e
        .time
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let now = time(e.time);
    let (involved, component) = match &e.regarding {
        Some(r) => (
            k8s::ObjectReference {
                api_version: Some(r.api_version.clone()),
                kind: Some(r.kind.clone()),
                name: Some(r.name.clone()),
                uid: Some(r.uid.clone()),
                ..Default::default()
            },
            r.controller.as_str(),
        ),
        None => (
            k8s::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(e.pod.name.clone()),
                namespace: Some(e.pod.namespace.clone()),
                uid: Some(e.pod.uid.clone()),
                field_path: e.field_path.clone(),
                ..Default::default()
            },
            "kubelet",
        ),
    };
    k8s::Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{nanos:x}", e.pod.name)),
            namespace: Some(e.pod.namespace.clone()),
            ..Default::default()
        },
        involved_object: involved,
        reason: Some(e.reason.clone()),
        message: Some(e.message.clone()),
        type_: Some(e.kind.to_string()),
        source: Some(k8s::EventSource {
            component: Some(component.into()),
            host: Some(node.to_owned()),
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        reporting_component: Some(component.into()),
        reporting_instance: Some(node.to_owned()),
        ..Default::default()
    }
}

/// Writes one event (a new object, or the repeat of a known one); returns the event's
/// name and count.
async fn write(
    client: &kube::Client,
    node: &str,
    e: &Event,
    seen: Option<&(String, i32)>,
) -> Result<(String, i32), kube::Error> {
    let api: Api<k8s::Event> = Api::namespaced(client.clone(), &e.pod.namespace);
    if let Some((name, count)) = seen {
        let patch = json!({"count": count + 1, "lastTimestamp": time(e.time)});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok((name.clone(), count + 1)),
            // Expired (events live an hour): a new one.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(err) => return Err(err),
        }
    }
    let created = api.create(&PostParams::default(), &object(e, node)).await?;
    Ok((created.metadata.name.unwrap_or_default(), 1))
}

/// Whether the API server refused `e` for good (a 4xx other than 429): trying again
/// would be refused the same way.
fn rejected(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 429)
}

/// Whether `e` says the event's namespace is deleted or being deleted.
fn namespace_gone(e: &kube::Error) -> bool {
    let kube::Error::Api(s) = e else {
        return false;
    };
    let details = s.details.as_ref();
    (s.code == 404 && details.is_some_and(|d| d.kind == "namespaces"))
        || (s.code == 403
            && details.is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

/// An event waiting to be tried again.
struct Retry {
    event: Event,
    tries: u32,
    due: tokio::time::Instant,
}

/// Writes the queued events until `shutdown` turns true.
pub async fn run(
    client: kube::Client,
    node: String,
    queue: EventQueue,
    limiter: RateLimiter,
    shutdown: CancellationToken,
) {
    let EventQueue {
        events: mut queue,
        stats,
    } = queue;
    let mut w = Writing::default();
    loop {
        if w.ready.is_empty() && !w.gather(&mut queue, &shutdown).await {
            return;
        }
        let Some((event, tries)) = w.ready.pop_front() else {
            continue;
        };
        if w.gone
            .get(&event.pod.namespace)
            .is_some_and(|at| at.elapsed() < NAMESPACE_GONE)
        {
            stats.drop_one("rejected");
            continue;
        }
        let k = key(&event);
        limiter.acquire().await;
        let result = write(&client, &node, &event, w.seen.get(&k)).await;
        w.written(result, (k, event, tries), &stats);
    }
}

/// The writer's state.
#[derive(Default)]
struct Writing {
    /// What was written for each event's key (its name and count), for the next
    /// occurrence's count.
    seen: HashMap<Key, (String, i32)>,
    /// Events to write now (with the tries they had) …
    ready: VecDeque<(Event, u32)>,
    /// … and those waiting to be tried again, soonest first (they all wait the same
    /// time).
    later: VecDeque<Retry>,
    /// Namespaces that answered that they are gone, and when.
    gone: HashMap<String, tokio::time::Instant>,
}

impl Writing {
    /// Waits for events (gathered for a moment, then all that came) or for retries
    /// that are due; `false` when the writer is to stop.
    async fn gather(
        &mut self,
        queue: &mut mpsc::Receiver<Event>,
        shutdown: &CancellationToken,
    ) -> bool {
        let due = self.later.front().map(|r| r.due);
        tokio::select! {
            e = queue.recv() => {
                let Some(e) = e else { return false };
                tokio::select! {
                    () = tokio::time::sleep(GATHER) => {}
                    () = shutdown.cancelled() => return false,
                }
                self.ready.push_back((e, 0));
                while let Ok(e) = queue.try_recv() {
                    self.ready.push_back((e, 0));
                }
            }
            () = sleep_until(due) => {}
            () = shutdown.cancelled() => return false,
        }
        let now = tokio::time::Instant::now();
        while self.later.front().is_some_and(|r| r.due <= now) {
            if let Some(r) = self.later.pop_front() {
                self.ready.push_back((r.event, r.tries));
            }
        }
        true
    }

    /// Takes the outcome of writing `event` (its `tries`th try): remembered, dropped
    /// (refused, or out of tries), or queued to be tried again.
    fn written(
        &mut self,
        result: Result<(String, i32), kube::Error>,
        (k, event, tries): (Key, Event, u32),
        stats: &EventStats,
    ) {
        match result {
            Ok(written) => {
                stats.written.inc();
                if self.seen.len() >= REMEMBERED {
                    self.seen.clear();
                }
                self.seen.insert(k, written);
            }
            Err(e) if rejected(&e) => {
                stats.drop_one("rejected");
                if namespace_gone(&e) {
                    if self.gone.len() >= REMEMBERED {
                        self.gone.retain(|_, at| at.elapsed() < NAMESPACE_GONE);
                    }
                    let at = tokio::time::Instant::now();
                    self.gone.insert(event.pod.namespace.clone(), at);
                }
                debug!(pod = %event.pod, reason = %event.reason, error = %e, "the API server rejected an event (will not retry)");
            }
            Err(e) if tries + 1 >= MAX_TRIES || self.later.len() >= QUEUE => {
                stats.drop_one("retries");
                warn!(pod = %event.pod, reason = %event.reason, error = %e, "dropping an event after {} tries", tries + 1);
            }
            Err(e) => {
                debug!(pod = %event.pod, reason = %event.reason, error = %e, attempt = tries + 1, "writing an event failed; trying again later");
                self.later.push_back(Retry {
                    event,
                    tries: tries + 1,
                    due: tokio::time::Instant::now() + RETRY_SLEEP,
                });
            }
        }
    }
}

/// Sleeps until `due`, or forever without one.
async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
