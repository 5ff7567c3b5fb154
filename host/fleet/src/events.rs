//! What a node tells about each WasmletPlugin, as Events on the object (reported by
//! `wasmlet`, from the node): a version loaded, swapped in for another, refused (and
//! what keeps serving), unloaded, the running pods an admission policy's new version
//! would reject — so that `kubectl describe wasmletplugin` tells a rollout's story node
//! by node. They go through the node's event recorder, rate limited with its other
//! events; a refusal said again unchanged is one event counted up.

use std::sync::Arc;

use wasmlet_agent::events::{Event, Kind, Recorder, Regarding};

use crate::object::{GROUP, KIND, VERSION};
use crate::status::Audit;

/// The reason of the event that names running pods a policy would reject.
pub const WOULD_REJECT_RUNNING: &str = "PodsWouldBeRejected";

/// The reporting controller of the events.
pub const CONTROLLER: &str = "wasmlet";

/// Where a node's plugin events go. Every node reports on
/// the same object, so each message names the node (`kubectl describe` shows only the
/// reporting controller).
#[derive(Clone)]
pub struct PluginEvents {
    recorder: Arc<dyn Recorder>,
    node: String,
}

/// How a version's signature reads in a message.
fn signed(verified: Option<&str>) -> String {
    verified.map_or_else(String::new, |k| {
        format!(", signed by {}", wasmlet_signing::describe_signer(k))
    })
}

impl PluginEvents {
    /// Events of node `node`, recorded by `recorder`.
    pub fn new(recorder: Arc<dyn Recorder>, node: &str) -> Self {
        Self {
            recorder,
            node: node.to_owned(),
        }
    }

    fn record(&self, name: &str, uid: &str, kind: Kind, reason: &str, message: String) {
        let object = Regarding {
            api_version: format!("{GROUP}/{VERSION}"),
            kind: KIND.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            controller: CONTROLLER.to_owned(),
        };
        self.recorder
            .record(Event::regarding(object, kind, reason, message));
    }

    /// `digest` serves, in place of `before` if another version served.
    pub fn loaded(
        &self,
        name: &str,
        uid: &str,
        generation: i64,
        digest: &str,
        verified: Option<&str>,
        before: Option<&str>,
    ) {
        let (signed, node) = (signed(verified), &self.node);
        match before {
            Some(old) if old != digest => self.record(
                name,
                uid,
                Kind::Normal,
                "PluginSwapped",
                format!(
                    "{digest} serves on {node} in place of {old} (generation {generation}{signed})"
                ),
            ),
            _ => self.record(
                name,
                uid,
                Kind::Normal,
                "PluginLoaded",
                format!("{digest} serves on {node} (generation {generation}{signed})"),
            ),
        }
    }

    /// The object's version at `generation` is refused for `reason`; `serving` keeps
    /// serving, if anything does.
    pub fn refused(
        &self,
        name: &str,
        uid: &str,
        generation: i64,
        reason: &str,
        serving: Option<&str>,
    ) {
        let after = serving.map_or_else(
            || "nothing serves".to_owned(),
            |d| format!("{d} keeps serving"),
        );
        self.record(
            name,
            uid,
            Kind::Warning,
            "PluginRefused",
            format!(
                "generation {generation} refused on {}: {reason}; {after}",
                self.node
            ),
        );
    }

    /// The audit of admission policy `digest`: of the pods the node runs, these it would
    /// reject (said only when there are some: the count of every audit is in the node's
    /// WasmletNode).
    pub fn would_reject_running(&self, name: &str, uid: &str, digest: &str, audit: &Audit) {
        let named: Vec<String> = audit
            .rejected
            .iter()
            .map(|p| format!("{} ({}: {})", p.pod, p.reason, p.message))
            .collect();
        let more = audit.would_reject - audit.rejected.len() as u64;
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        self.record(
            name,
            uid,
            Kind::Warning,
            WOULD_REJECT_RUNNING,
            format!(
                "{digest} would reject {} of the {} pods running on {}: {}{more}",
                audit.would_reject,
                audit.pods,
                self.node,
                named.join("; ")
            ),
        );
    }

    /// `digest` no longer serves on the node (`why`: the object is gone, or no longer
    /// selects the node).
    pub fn unloaded(&self, name: &str, uid: &str, digest: &str, why: &str) {
        self.record(
            name,
            uid,
            Kind::Normal,
            "PluginUnloaded",
            format!("{digest} unloaded from {}: {why}", self.node),
        );
    }
}
