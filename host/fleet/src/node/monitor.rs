//! What a node says of the admission policies it serves beyond serving them: for a
//! policy in `mode: Monitor`, how many pods it admitted that the policy would have
//! rejected; for every policy, once a version of it begins serving, what that version
//! would reject of the pods the node already runs — an audit, touching none of them.
//! Both go into the policy's entry in the node's WasmletNode, where `wasmlet
//! controller` sums them over the nodes.
//!
//! The counts are read every [`MONITOR_PERIOD`] while a policy in Monitor mode serves,
//! so a burst of admissions is one write, not one per pod. After a restart the node
//! audits what it serves from its store one period after it starts, when its pods are
//! back.

use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use super::{Controller, Desired, Kind, now_rfc3339};
use crate::status::Audit;

/// How often the counts of policies in Monitor mode are read.
pub const MONITOR_PERIOD: Duration = Duration::from_secs(10);

/// Whether `d` is an admission policy in Monitor mode.
fn monitor_mode(d: &Desired) -> bool {
    d.kind == Kind::Admission && d.spec["admission"]["mode"].as_str() == Some("Monitor")
}

impl Controller {
    /// What the entry of `name` says beside its state, for the version serving
    /// (`digest`): the count of a policy in Monitor mode, and its audit.
    pub(super) fn extras(&self, name: &str, digest: Option<&str>) -> (Option<u64>, Option<Audit>) {
        let would_reject = self
            .serving
            .get(name)
            .filter(|d| monitor_mode(d))
            .and_then(|_| self.targets.chain.would_reject(name));
        let audit = self
            .audits
            .get(name)
            .filter(|a| Some(a.digest.as_str()) == digest)
            .cloned();
        (would_reject, audit)
    }

    /// Brings the entry of `name` in line with its count and audit.
    pub(super) fn refresh(&mut self, name: &str) {
        let Some(old) = self.reported.get(name) else {
            return;
        };
        let (would_reject, audit) = self.extras(name, old.digest.as_deref());
        if old.would_reject == would_reject && old.audit == audit {
            return;
        }
        let mut entry = old.clone();
        entry.would_reject = would_reject;
        entry.audit = audit;
        self.reported.insert(name.to_owned(), entry);
        self.unsent = true;
    }

    /// Starts asking the version of admission policy `name` now serving about each pod
    /// the node runs, beside the others.
    pub(super) fn begin_audit(&mut self, name: &str) {
        self.audits.remove(name);
        let (Some(pods), Some(d)) = (&self.targets.admitted, self.serving.get(name)) else {
            return;
        };
        if d.kind != Kind::Admission {
            return;
        }
        let digest = format!("sha256:{}", d.sha256);
        let (chain, pods, owned) = (self.targets.chain.clone(), pods.clone(), name.to_owned());
        self.audit_runs.push(Box::pin(async move {
            let asked = pods.pods.admissions(&pods.node);
            let audit = chain.audit(&owned, &asked).await;
            (owned, digest, audit)
        }));
    }

    /// An audit ended: kept for the entry unless another version serves by now; the
    /// pods it would reject, if any, are told in an event on the WasmletPlugin.
    pub(super) fn audited(
        &mut self,
        name: &str,
        digest: &str,
        audit: Option<wasmlet_plugin_host::Audit>,
    ) {
        let serving = self
            .serving
            .get(name)
            .is_some_and(|d| digest.strip_prefix("sha256:") == Some(d.sha256.as_str()));
        let Some(audit) = audit.filter(|_| serving) else {
            return;
        };
        let audit = Audit::of(digest, now_rfc3339(), audit);
        info!(
            plugin = name,
            digest,
            pods = audit.pods,
            would_reject = audit.would_reject,
            "admission policy asked about the pods the node runs"
        );
        if audit.would_reject > 0 {
            let uid = self.uid(name);
            self.targets
                .events
                .would_reject_running(name, &uid, digest, &audit);
        }
        self.audits.insert(name.to_owned(), audit);
        self.refresh(name);
    }

    /// Every [`MONITOR_PERIOD`]: the audits waiting since a restart start, and the
    /// counts of policies in Monitor mode are read into their entries.
    pub(super) fn tick(&mut self) {
        self.tick_at = None;
        for name in std::mem::take(&mut self.unaudited) {
            self.begin_audit(&name);
        }
        let monitored: Vec<String> = self
            .serving
            .values()
            .filter(|d| monitor_mode(d))
            .map(|d| d.name.clone())
            .collect();
        for name in monitored {
            self.refresh(&name);
        }
    }

    /// Sets when the next [`Self::tick`] is due: only while there is something to read.
    pub(super) fn schedule_tick(&mut self) {
        let needed = !self.unaudited.is_empty() || self.serving.values().any(monitor_mode);
        self.tick_at = match (needed, self.tick_at) {
            (false, _) => None,
            (true, None) => Some(Instant::now() + MONITOR_PERIOD),
            (true, at) => at,
        };
    }
}
