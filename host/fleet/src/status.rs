//! What a node says about each WasmletPlugin: its own entry in `status.nodes` (a list
//! keyed by node name), written with server-side apply under a field manager of its
//! own, so a thousand nodes write one object without conflicting; and `status.summary`
//! (how many nodes serve the current generation), written by one of them.
//!
//! Writes go through one task per node: the latest entry per plugin wins, a `Pending`
//! entry waits [`PENDING_DELAY`] (a load that finishes sooner is written once, as
//! `Loaded`), and a failed write is retried with back-off.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::object::{GROUP, KIND, VERSION, api_resource};

/// How long a load may take before the node says it is `Pending`.
pub const PENDING_DELAY: Duration = Duration::from_secs(2);
/// How long a summary waits for more nodes' entries before it is written.
pub const SUMMARY_DELAY: Duration = Duration::from_millis(300);
/// First wait after a failed write; doubled up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(30);
/// The field manager of the summary (whichever node writes it).
pub const SUMMARY_MANAGER: &str = "wasmlet-summary";

/// A node's state for one plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// The object's current version serves on the node.
    Loaded,
    /// The object's current version cannot serve on the node (`message` says why); the
    /// version in `digest`, if any, still does.
    Failed,
    /// The current version is being fetched or compiled.
    Pending,
}

/// One node's entry in `status.nodes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The node.
    pub node_name: String,
    /// The object's `metadata.generation` this entry is about.
    pub observed_generation: i64,
    /// The digest serving on the node (`sha256:…`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Loaded, Failed or Pending.
    pub state: State,
    /// Why, for Failed and Pending.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When `state` last changed.
    #[serde(default)]
    pub last_transition_time: String,
    /// The key that signed the digest serving (its id), when the node verifies
    /// signatures and one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<String>,
}

impl Entry {
    /// Whether the two say the same, their transition times aside.
    pub fn same(&self, other: &Entry) -> bool {
        self.node_name == other.node_name
            && self.observed_generation == other.observed_generation
            && self.digest == other.digest
            && self.state == other.state
            && self.message == other.message
            && self.verified == other.verified
    }
}

/// The entries of an object's `status.nodes`, from its `status`.
pub fn entries(status: &Value) -> Vec<Entry> {
    status["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| serde_json::from_value(e.clone()).ok())
        .collect()
}

/// `status.summary` of an object whose entries are `entries`, at `generation`.
pub fn summary(generation: i64, entries: &[Entry]) -> Value {
    let current = |s: State| {
        entries
            .iter()
            .filter(|e| e.observed_generation == generation && e.state == s)
            .count()
    };
    let (serving, failed) = (current(State::Loaded), current(State::Failed));
    let verified = entries
        .iter()
        .filter(|e| {
            e.observed_generation == generation && e.state == State::Loaded && e.verified.is_some()
        })
        .count();
    json!({
        "observedGeneration": generation,
        "nodes": entries.len(),
        "serving": serving,
        "verified": verified,
        "failed": failed,
        "pending": entries.len() - serving - failed,
    })
}

/// The node that writes an object's summary: the first by name among those with an
/// entry (every node computes the same answer from the same object). Read from the
/// status's JSON text without the rest of each entry: every node asks at every status
/// change, and only one reads the entries in full.
pub fn summary_writer(status: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Names {
        #[serde(default)]
        nodes: Vec<Name>,
    }
    #[derive(Deserialize)]
    struct Name {
        #[serde(rename = "nodeName", default)]
        node_name: String,
    }
    let names: Names = serde_json::from_str(status).ok()?;
    names
        .nodes
        .into_iter()
        .map(|n| n.node_name)
        .filter(|n| !n.is_empty())
        .min()
}

/// A write the node asks for.
#[derive(Debug)]
pub enum Write {
    /// Its entry for plugin `.0` (`None`: remove it).
    Entry(String, Option<Entry>),
    /// The summary of plugin `.0`.
    Summary(String, Value),
}

/// Sends writes to the node's status task.
#[derive(Debug, Clone)]
pub struct Writer {
    tx: mpsc::UnboundedSender<Write>,
}

impl Writer {
    /// Starts the status task of `node`.
    pub fn start(client: kube::Client, node: String) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(client, node, rx));
        Self { tx }
    }

    /// Asks for a write; the latest for a plugin wins.
    pub fn send(&self, write: Write) {
        let _ = self.tx.send(write);
    }
}

/// A write waiting its turn.
struct Queued {
    body: Value,
    manager: String,
    due: Instant,
    attempt: u32,
}

async fn run(client: kube::Client, node: String, mut rx: mpsc::UnboundedReceiver<Write>) {
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource());
    let entry_manager = format!("wasmlet-node/{node}");
    // (plugin, is-summary) → the write.
    let mut queue: BTreeMap<(String, bool), Queued> = BTreeMap::new();
    loop {
        let next = queue.values().map(|q| q.due).min();
        let write = tokio::select! {
            w = rx.recv() => match w {
                Some(w) => Some(w),
                None => return,
            },
            () = async {
                match next {
                    Some(due) => tokio::time::sleep_until(due).await,
                    None => std::future::pending().await,
                }
            } => None,
        };
        let now = Instant::now();
        if let Some(write) = write {
            let (key, body, manager, due) = match write {
                Write::Entry(name, entry) => {
                    let due = match &entry {
                        Some(e) if e.state == State::Pending => now + PENDING_DELAY,
                        _ => now,
                    };
                    let nodes: Vec<Entry> = entry.into_iter().collect();
                    let body = apply_body(&name, json!({"nodes": nodes}));
                    ((name, false), body, entry_manager.clone(), due)
                }
                Write::Summary(name, summary) => {
                    // Nodes report one after another: the summary waits for a few of
                    // them, and a newer one keeps the first one's turn.
                    let due = queue
                        .get(&(name.clone(), true))
                        .map_or(now + SUMMARY_DELAY, |q| q.due);
                    let body = apply_body(&name, json!({"summary": summary}));
                    ((name, true), body, SUMMARY_MANAGER.to_owned(), due)
                }
            };
            queue.insert(
                key,
                Queued {
                    body,
                    manager,
                    due,
                    attempt: 0,
                },
            );
            // Take every write already waiting before writing any.
            continue;
        }
        let due: Vec<(String, bool)> = queue
            .iter()
            .filter(|(_, q)| q.due <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let Some(q) = queue.remove(&key) else {
                continue;
            };
            let params = PatchParams::apply(&q.manager).force();
            match api
                .patch_status(&key.0, &params, &Patch::Apply(&q.body))
                .await
            {
                Ok(_) => debug!(plugin = %key.0, summary = key.1, "plugin status written"),
                // The object is gone: nothing to say about it.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                // A summary refused (deploy/'s admission policy: another node, first by
                // name now, is the writer): that node writes it.
                Err(kube::Error::Api(e)) if e.code == 403 && key.1 => {
                    debug!(plugin = %key.0, reason = %e.message, "the summary is not this node's to write");
                }
                Err(e) => {
                    let attempt = q.attempt + 1;
                    let wait =
                        (FIRST_RETRY * 2u32.saturating_pow(attempt.min(8) - 1)).min(MAX_RETRY);
                    if attempt == 1 || attempt.is_power_of_two() {
                        warn!(plugin = %key.0, error = %e, attempt, retry_in = ?wait, "writing the plugin's status failed");
                    }
                    // A newer write for the plugin, queued meanwhile, wins.
                    queue.entry(key).or_insert(Queued {
                        due: Instant::now() + wait,
                        attempt,
                        ..q
                    });
                }
            }
        }
    }
}

/// The server-side apply body for `status` of plugin `name`.
fn apply_body(name: &str, status: Value) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"name": name},
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(node: &str, generation: i64, state: State) -> Entry {
        Entry {
            node_name: node.into(),
            observed_generation: generation,
            digest: None,
            state,
            message: String::new(),
            last_transition_time: String::new(),
            verified: None,
        }
    }

    #[test]
    fn the_summary_counts_nodes_at_the_current_generation() {
        let signed = |mut e: Entry| {
            e.verified = Some("sha256:0123456789abcdef".into());
            e
        };
        let entries = [
            entry("b", 2, State::Loaded),
            entry("a", 2, State::Failed),
            signed(entry("c", 1, State::Loaded)),
            entry("d", 2, State::Pending),
            signed(entry("e", 2, State::Loaded)),
        ];
        assert_eq!(
            summary(2, &entries),
            json!({"observedGeneration": 2, "nodes": 5, "serving": 2, "verified": 1, "failed": 1, "pending": 2})
        );
        let status = json!({"nodes": entries}).to_string();
        assert_eq!(summary_writer(&status).as_deref(), Some("a"));
        assert_eq!(summary_writer(r#"{"nodes": []}"#), None);
        assert_eq!(summary_writer("{}"), None);
    }

    #[test]
    fn entries_are_read_from_the_object_and_compared_without_their_time() {
        let object = json!({"status": {"nodes": [
            {"nodeName": "a", "observedGeneration": 3, "digest": "sha256:ab", "state": "Loaded",
             "lastTransitionTime": "2026-11-24T00:00:00Z"},
            {"nodeName": "b", "state": "Unknown"},
        ]}});
        let read = entries(&object["status"]);
        assert_eq!(read.len(), 1, "an entry this node cannot read is skipped");
        let mut mine = entry("a", 3, State::Loaded);
        mine.digest = Some("sha256:ab".into());
        assert!(read[0].same(&mine));
        assert_ne!(read[0], mine);
    }
}
