//! What a node says about the WasmletPlugins that select it: one object of its own, the
//! cluster-scoped WasmletNode named after it (owned by its Node, so it goes with the
//! Node), whose status lists each plugin's entry. The node writes that object only and
//! reads nobody else's status: a rollout costs one small write per node, whatever the
//! size of the cluster. `wasmlet controller` counts the objects into each
//! WasmletPlugin's status ([`crate::controller`]).
//!
//! Writes go through one task per node holding the node's whole list: the latest list
//! wins, an entry that turned `Pending` waits [`PENDING_DELAY`] (a load that finishes
//! sooner is written once, as `Loaded`), and a failed write is retried with back-off.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

use wasmlet_plugin_host::AuditedPod;

use crate::object::{GROUP, NODE_KIND, VERSION, node_api_resource};

/// How long a load may take before the node says it is `Pending`. Until then the
/// controller counts the node as not having said (pending as well): a Pending write
/// only tells a load that is slow — and when a thousand nodes pull from a slow registry
/// at once, a shorter delay would double the writes exactly when the API server is
/// busiest.
pub const PENDING_DELAY: Duration = Duration::from_secs(10);
/// First wait after a failed write; doubled up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(30);

/// The field manager of node `node`'s writes.
pub fn manager(node: &str) -> String {
    format!("wasmlet-node/{node}")
}

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

/// One plugin's entry in a WasmletNode's `status.plugins`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The WasmletPlugin.
    pub name: String,
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
    /// An admission policy in Monitor mode: the pods admitted since the digest serving
    /// began serving that it would have rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_reject: Option<u64>,
    /// An admission policy: what the digest serving said of the pods the node ran when
    /// it began serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<Audit>,
}

impl Entry {
    /// Whether the two say the same, their transition times aside.
    pub fn same(&self, other: &Entry) -> bool {
        self.name == other.name
            && self.observed_generation == other.observed_generation
            && self.digest == other.digest
            && self.state == other.state
            && self.message == other.message
            && self.verified == other.verified
            && self.would_reject == other.would_reject
            && self.audit == other.audit
    }
}

/// What an admission policy's version said of the pods a node ran when it began
/// serving there: each asked about beside the others, none touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Audit {
    /// The digest asked (`sha256:…`).
    pub digest: String,
    /// When.
    #[serde(default)]
    pub time: String,
    /// The pods the node ran.
    pub pods: u64,
    /// Of those, the pods it would reject.
    pub would_reject: u64,
    /// The first few of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<AuditedPod>,
}

impl Audit {
    /// The audit of `digest` at `time`, as the plugin host made it.
    pub fn of(digest: &str, time: String, audit: wasmlet_plugin_host::Audit) -> Self {
        Self {
            digest: digest.to_owned(),
            time,
            pods: audit.pods,
            would_reject: audit.would_reject,
            rejected: audit.rejected,
        }
    }
}

/// The node's entries, by plugin.
pub type Entries = BTreeMap<String, Entry>;

/// The entries of a WasmletNode's `status` (an entry this version cannot read is
/// skipped).
pub fn entries(status: &Value) -> Entries {
    status["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| serde_json::from_value::<Entry>(e.clone()).ok())
        .map(|e| (e.name.clone(), e))
        .collect()
}

/// Whether two lists say the same, transition times aside.
fn same_entries(a: &Entries, b: &Entries) -> bool {
    a.len() == b.len() && a.values().zip(b.values()).all(|(x, y)| x.same(y))
}

/// The `status` of a WasmletNode listing `entries`, with the counts its columns show
/// (`wouldReject`: the running pods the audits of its admission policies would reject).
pub fn node_status(entries: &Entries) -> Value {
    let count = |s: State| entries.values().filter(|e| e.state == s).count();
    json!({
        "plugins": entries.values().collect::<Vec<_>>(),
        "serving": count(State::Loaded),
        "failed": count(State::Failed),
        "pending": count(State::Pending),
        "wouldReject": entries
            .values()
            .filter_map(|e| e.audit.as_ref())
            .map(|a| a.would_reject)
            .sum::<u64>(),
    })
}

/// What the node tells its status task.
#[derive(Debug)]
pub enum Write {
    /// Every entry the node has now (a plugin missing from it is removed).
    Entries(Entries),
    /// The UID of the node's Node, which owns the WasmletNode.
    Owner(String),
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
        tokio::spawn(Task::new(client, node).run(rx));
        Self { tx }
    }

    /// Asks for a write; the latest list wins.
    pub fn send(&self, write: Write) {
        let _ = self.tx.send(write);
    }
}

/// The node's status task.
struct Task {
    api: Api<DynamicObject>,
    node: String,
    manager: String,
    /// The Node's UID, once known (needed to create the object).
    owner: Option<String>,
    /// What the object says, once read (`None`: not read yet).
    written: Option<Entries>,
    /// Whether the object exists.
    exists: bool,
    /// What the node says now, and when each entry last changed.
    wanted: Entries,
    changed: BTreeMap<String, Instant>,
    /// After a failed read or write: when to try again, and how many failed.
    retry: Option<(Instant, u32)>,
}

impl Task {
    fn new(client: kube::Client, node: String) -> Self {
        Self {
            api: Api::all_with(client, &node_api_resource()),
            manager: manager(&node),
            node,
            owner: None,
            written: None,
            exists: false,
            wanted: Entries::new(),
            changed: BTreeMap::new(),
            retry: None,
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Write>) {
        let mut told = false;
        loop {
            let now = Instant::now();
            let due = if told { self.due(now) } else { None };
            let write = tokio::select! {
                w = rx.recv() => match w {
                    Some(w) => Some(w),
                    None => return,
                },
                () = sleep_until(due) => None,
            };
            match write {
                Some(Write::Entries(entries)) => {
                    self.want(entries, Instant::now());
                    told = true;
                }
                Some(Write::Owner(uid)) => self.owner = Some(uid),
                None => self.attempt().await,
            }
        }
    }

    /// Takes the node's new list.
    fn want(&mut self, entries: Entries, now: Instant) {
        for (name, e) in &entries {
            if self.wanted.get(name).is_none_or(|w| !w.same(e)) {
                self.changed.insert(name.clone(), now);
            }
        }
        self.changed.retain(|name, _| entries.contains_key(name));
        self.wanted = entries;
    }

    /// When the next read or write is due: now when the object is unread or says
    /// otherwise than it would, after a retry's wait, when a young Pending entry comes
    /// of age.
    fn due(&self, now: Instant) -> Option<Instant> {
        if let Some((at, _)) = self.retry {
            return Some(at);
        }
        if self.written.is_none() {
            return Some(now);
        }
        if !self.exists {
            // The node has an object even with no plugin (the controller counts the
            // nodes that have one); it cannot be made before the Node is seen.
            return self.owner.as_ref().map(|_| now);
        }
        let written = self.written.as_ref()?;
        if !same_entries(&self.view(now), written) {
            return Some(now);
        }
        coming_of_age(&self.wanted, &self.changed, now)
    }

    /// The list to write at `now` (see [`view`]).
    fn view(&self, now: Instant) -> Entries {
        let empty = Entries::new();
        view(
            &self.wanted,
            &self.changed,
            self.written.as_ref().unwrap_or(&empty),
            now,
        )
    }

    /// Reads the object if it is unread, else writes what is due; a failure waits.
    async fn attempt(&mut self) {
        let result = if self.written.is_none() {
            self.read().await
        } else {
            self.write().await
        };
        match result {
            Ok(()) => self.retry = None,
            Err(e) => {
                let attempt = self.retry.map_or(1, |(_, a)| a + 1);
                let wait = (FIRST_RETRY * 2u32.saturating_pow(attempt.min(8) - 1)).min(MAX_RETRY);
                if attempt == 1 || attempt.is_power_of_two() {
                    warn!(node = %self.node, error = %e, attempt, retry_in = ?wait, "writing the node's WasmletNode failed");
                }
                self.retry = Some((Instant::now() + wait, attempt));
            }
        }
    }

    /// Reads what the object says (nothing when there is none).
    async fn read(&mut self) -> Result<(), kube::Error> {
        match self.api.get_opt(&self.node).await? {
            Some(o) => {
                self.exists = true;
                self.written = Some(entries(&o.data["status"]));
            }
            None => {
                self.exists = false;
                self.written = Some(Entries::new());
            }
        }
        Ok(())
    }

    /// Writes the list due now, making the object first when there is none.
    async fn write(&mut self) -> Result<(), kube::Error> {
        if !self.exists {
            let Some(uid) = self.owner.clone() else {
                return Ok(());
            };
            self.create(&uid).await?;
        }
        let view = self.view(Instant::now());
        // The node is the object's only writer and says its whole list each time: a
        // merge patch replaces it, at a fraction of a server-side apply's cost to the
        // API server (a thousand nodes write in every rollout).
        let body = json!({"status": node_status(&view)});
        let params = PatchParams {
            field_manager: Some(self.manager.clone()),
            ..PatchParams::default()
        };
        match self
            .api
            .patch_status(&self.node, &params, &Patch::Merge(&body))
            .await
        {
            Ok(_) => {
                debug!(node = %self.node, plugins = view.len(), "WasmletNode status written");
                self.written = Some(view);
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                // Deleted meanwhile (its Node was, and came back): made again next.
                self.exists = false;
                Err(kube::Error::Api(e))
            }
            Err(e) => Err(e),
        }
    }

    /// Makes the node's object, owned by its Node.
    async fn create(&mut self, uid: &str) -> Result<(), kube::Error> {
        let body = json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": NODE_KIND,
            "metadata": {
                "name": self.node,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}],
            },
        });
        let params = PatchParams::apply(&self.manager).force();
        self.api
            .patch(&self.node, &params, &Patch::Apply(&body))
            .await?;
        self.exists = true;
        Ok(())
    }
}

/// The list to write at `now`: what the node says (`wanted`, each entry changed at
/// `changed`), but a Pending entry younger than [`PENDING_DELAY`] leaves what was
/// `written` before in its place; a state that did not change keeps the time it was
/// written with.
fn view(
    wanted: &Entries,
    changed: &BTreeMap<String, Instant>,
    written: &Entries,
    now: Instant,
) -> Entries {
    let mut out = Entries::new();
    for (name, e) in wanted {
        let young = e.state == State::Pending
            && changed
                .get(name)
                .is_some_and(|at| now < *at + PENDING_DELAY);
        let entry = match (young, written.get(name)) {
            (true, Some(before)) => before.clone(),
            (true, None) => continue,
            (false, Some(before))
                if before.state == e.state && !before.last_transition_time.is_empty() =>
            {
                Entry {
                    last_transition_time: before.last_transition_time.clone(),
                    ..e.clone()
                }
            }
            (false, _) => e.clone(),
        };
        out.insert(name.clone(), entry);
    }
    out
}

/// When the next young Pending entry of `wanted` comes of age.
fn coming_of_age(
    wanted: &Entries,
    changed: &BTreeMap<String, Instant>,
    now: Instant,
) -> Option<Instant> {
    wanted
        .values()
        .filter(|e| e.state == State::Pending)
        .filter_map(|e| changed.get(&e.name))
        .map(|at| *at + PENDING_DELAY)
        .filter(|at| *at > now)
        .min()
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
