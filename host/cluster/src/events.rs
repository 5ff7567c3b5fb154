//! Events to the API server: what `kubectl describe pod` lists under Events.
//!
//! [`ApiRecorder`] takes the agent's events without ever blocking it (a full queue
//! drops the event, as the kubelet's broadcaster does); [`run`] writes them as core/v1
//! Events from `kubelet` on this node. A repeat of an event (same pod, container,
//! reason and message) raises the first one's `count` and `lastTimestamp` with a PATCH
//! instead of adding another object. Writes are rate limited (eventRecordQPS /
//! eventBurst) and a write that fails is tried again [`MAX_TRIES`] times, 10 s apart.
//! The writer lets a burst gather for [`GATHER`] before it writes: events are for
//! people reading later, and a burst of pod starts gets its status patches out first.
//! Each event keeps the time it was recorded.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};
use wasmlet_agent::events::{Event, Recorder};

use crate::ratelimit::RateLimiter;

/// How many events wait at most; beyond that they are dropped.
pub const QUEUE: usize = 1000;
/// How many times one event is tried (the kubelet's maxTriesPerEvent).
pub const MAX_TRIES: u32 = 12;
/// The wait between two tries.
pub const RETRY_SLEEP: Duration = Duration::from_secs(10);
/// How long a burst of events gathers before it is written.
pub const GATHER: Duration = Duration::from_millis(100);
/// How many distinct events are remembered for counting repeats.
const REMEMBERED: usize = 4096;

/// The agent's side: queues events for [`run`].
#[derive(Debug)]
pub struct ApiRecorder {
    queue: mpsc::Sender<Event>,
    dropped: AtomicU64,
}

impl ApiRecorder {
    /// A recorder and the queue [`run`] takes.
    pub fn new() -> (Arc<Self>, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (
            Arc::new(ApiRecorder {
                queue: tx,
                dropped: AtomicU64::new(0),
            }),
            rx,
        )
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Recorder for ApiRecorder {
    fn record(&self, event: Event) {
        if self.queue.try_send(event).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
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

/// The Event object for `e`, from `kubelet` on `node`.
pub fn object(e: &Event, node: &str) -> k8s::Event {
    let nanos = e
        .time
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let now = time(e.time);
    k8s::Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{nanos:x}", e.pod.name)),
            namespace: Some(e.pod.namespace.clone()),
            ..Default::default()
        },
        involved_object: k8s::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(e.pod.name.clone()),
            namespace: Some(e.pod.namespace.clone()),
            uid: Some(e.pod.uid.clone()),
            field_path: e.field_path.clone(),
            ..Default::default()
        },
        reason: Some(e.reason.clone()),
        message: Some(e.message.clone()),
        type_: Some(e.kind.to_string()),
        source: Some(k8s::EventSource {
            component: Some("kubelet".into()),
            host: Some(node.to_owned()),
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        reporting_component: Some("kubelet".into()),
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

/// Writes the queued events until `shutdown` turns true.
pub async fn run(
    client: kube::Client,
    node: String,
    mut queue: mpsc::Receiver<Event>,
    limiter: RateLimiter,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut seen: HashMap<Key, (String, i32)> = HashMap::new();
    let mut batch: Vec<Event> = Vec::new();
    loop {
        if batch.is_empty() {
            let first = tokio::select! {
                e = queue.recv() => match e {
                    Some(e) => e,
                    None => return,
                },
                _ = shutdown.changed() => return,
            };
            tokio::select! {
                () = tokio::time::sleep(GATHER) => {}
                _ = shutdown.changed() => return,
            }
            batch.push(first);
            while let Ok(e) = queue.try_recv() {
                batch.push(e);
            }
            batch.reverse();
        }
        let Some(event) = batch.pop() else { continue };
        let k = key(&event);
        for attempt in 1..=MAX_TRIES {
            limiter.acquire().await;
            match write(&client, &node, &event, seen.get(&k)).await {
                Ok(written) => {
                    if seen.len() >= REMEMBERED {
                        seen.clear();
                    }
                    seen.insert(k, written);
                    break;
                }
                Err(e) if attempt == MAX_TRIES => {
                    warn!(pod = %event.pod, reason = %event.reason, error = %e, "dropping an event after {MAX_TRIES} tries");
                }
                Err(e) => {
                    debug!(pod = %event.pod, reason = %event.reason, error = %e, attempt, "writing an event failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(RETRY_SLEEP) => {}
                        _ = shutdown.changed() => return,
                    }
                }
            }
        }
    }
}
