//! The API-server pod source: the pods bound to this node (`spec.nodeName=NAME`),
//! listed and watched through kube's watcher, handed to the agent's pod config as the
//! `api` source's whole set each time it changes (the kubelet's SET semantics).
//!
//! The watcher lists, then watches from the list's resourceVersion; a broken connection
//! resumes from the last resourceVersion seen, and a 410 Gone (the history is gone) or an
//! API server restart lists again. Because every report is the whole set, a relist can
//! neither lose nor duplicate a pod: the merger compares it with the last set.
//!
//! Mirror pods (the API server's copies of this node's static pods) come through the
//! same watch; they are not pods to run, so they go to [`MirrorPods`] instead.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wasmlet_agent::syncloop::SourceSet;
use wasmlet_core::pod::{self, PodKey};
use wasmlet_plugin_host::source::SourcePod;

use crate::mirror::MirrorPods;

/// The first wait after the watch fails; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between two attempts to list or watch.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The most watch events taken into one report.
const BATCH: usize = 512;

/// The field selector for the pods bound to `node`.
pub fn selector(node: &str) -> String {
    format!("spec.nodeName={node}")
}

/// What the watch has shown so far, by UID, and what changed since the last report.
#[derive(Debug)]
struct Store {
    pods: BTreeMap<String, k8s::Pod>,
    /// Objects of a list in progress (between `Init` and `InitDone`).
    listing: Option<BTreeMap<String, k8s::Pod>>,
    /// Pods to run that are new or changed since the last report.
    dirty: HashSet<String>,
    /// Everything is reported again (after a list).
    all_dirty: bool,
    /// The mirror pods changed since the last report.
    mirrors_changed: bool,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            pods: BTreeMap::new(),
            listing: None,
            dirty: HashSet::new(),
            all_dirty: true,
            mirrors_changed: true,
        }
    }
}

/// What one report says.
struct Report {
    /// Pods to run, new or changed.
    changed: Vec<SourcePod>,
    /// Pods to run as they were in the last report.
    unchanged: Vec<String>,
    /// The mirror pods, if they changed.
    mirrors: Option<Vec<k8s::Pod>>,
}

impl Store {
    /// Applies one event; returns whether the set to report changed.
    fn apply(&mut self, event: Event<k8s::Pod>) -> bool {
        let uid = |p: &k8s::Pod| p.metadata.uid.clone().unwrap_or_default();
        match event {
            Event::Apply(p) => {
                let uid = uid(&p);
                // A change of status alone (most often the agent's own patch coming back)
                // is nothing to act on: kept, not reported — unless it is a readiness
                // gate's condition, set by others, which the pod's Ready follows.
                let same = self.pods.get(&uid).is_some_and(|old| {
                    !pod::differ_semantically(old, &p)
                        && pod::gate_conditions(old) == pod::gate_conditions(&p)
                });
                if !same {
                    if pod::is_mirror(&p) {
                        self.mirrors_changed = true;
                    } else {
                        self.dirty.insert(uid.clone());
                    }
                }
                self.pods.insert(uid, p);
                !same
            }
            Event::Delete(p) => match self.pods.remove(&uid(&p)) {
                Some(gone) => {
                    if pod::is_mirror(&gone) {
                        self.mirrors_changed = true;
                    }
                    true
                }
                None => false,
            },
            Event::Init => {
                self.listing = Some(BTreeMap::new());
                false
            }
            Event::InitApply(p) => {
                self.listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert(uid(&p), p);
                false
            }
            Event::InitDone => {
                self.pods = self.listing.take().unwrap_or_default();
                self.all_dirty = true;
                self.mirrors_changed = true;
                true
            }
        }
    }

    /// The report of what changed since the last one: new and changed pods in full,
    /// the others by UID, the mirror pods if they changed.
    fn report(&mut self) -> Report {
        let mut r = Report {
            changed: Vec::new(),
            unchanged: Vec::new(),
            mirrors: self.mirrors_changed.then(Vec::new),
        };
        for (uid, p) in &self.pods {
            if pod::is_mirror(p) {
                if let Some(m) = r.mirrors.as_mut() {
                    m.push(p.clone());
                }
            } else if self.all_dirty || self.dirty.contains(uid) {
                r.changed.push(SourcePod {
                    // Where it came from, for problems the merger reports.
                    origin: PodKey::of(p).full_name(),
                    pod: p.clone(),
                });
            } else {
                r.unchanged.push(uid.clone());
            }
        }
        self.dirty.clear();
        self.all_dirty = false;
        self.mirrors_changed = false;
        r
    }
}

/// Lists and watches the pods bound to `node` until `shutdown` turns true, sending each
/// new set to `sink` and the mirror pods to `mirrors`.
pub async fn run(
    client: kube::Client,
    node: String,
    sink: mpsc::Sender<SourceSet>,
    mirrors: Arc<MirrorPods>,
    shutdown: CancellationToken,
) {
    let api: Api<k8s::Pod> = Api::all(client);
    let config = watcher::Config::default().fields(&selector(&node));
    let mut events = watcher::watcher(api, config).ready_chunks(BATCH).boxed();
    let mut store = Store::default();
    let mut backoff = FIRST_BACKOFF;
    let mut failures = 0u32;
    loop {
        let batch = tokio::select! {
            batch = events.next() => batch,
            () = shutdown.cancelled() => return,
        };
        let Some(batch) = batch else { return };
        let mut changed = false;
        let mut failed = None;
        for item in batch {
            match item {
                Ok(event) => changed |= store.apply(event),
                Err(e) => failed = Some(e),
            }
        }
        if changed {
            if failures > 0 {
                info!(node = %node, "watching the node's pods again");
                failures = 0;
                backoff = FIRST_BACKOFF;
            }
            let report = store.report();
            if let Some(m) = report.mirrors {
                mirrors.set(m);
            }
            let set = SourceSet {
                source: pod::API_SOURCE.into(),
                pods: report.changed,
                unchanged: report.unchanged,
                problems: Vec::new(),
                removed: false,
                directory: None,
            };
            if sink.send(set).await.is_err() {
                return;
            }
        }
        if let Some(e) = failed {
            failures += 1;
            if failures == 1 || failures.is_power_of_two() {
                warn!(node = %node, error = %e, retry_in = ?backoff, attempt = failures, "listing or watching the node's pods failed; pods keep running");
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, mirror: bool) -> k8s::Pod {
        let mut p = k8s::Pod::default();
        p.metadata.uid = Some(uid.into());
        p.metadata.name = Some(format!("p-{uid}"));
        p.metadata.namespace = Some("default".into());
        if mirror {
            p.metadata.annotations = Some(BTreeMap::from([(
                pod::CONFIG_MIRROR_ANNOTATION.to_string(),
                "h".to_string(),
            )]));
        }
        p
    }

    #[test]
    fn reports_carry_what_changed_and_a_relist_replaces_the_set() {
        let mut s = Store::default();
        assert!(s.apply(Event::Apply(pod("a", false))));
        assert!(s.apply(Event::Apply(pod("m", true))));
        assert!(!s.apply(Event::Delete(pod("x", false))), "never seen");
        let r = s.report();
        assert_eq!(r.changed.len(), 1, "the first report is whole");
        assert_eq!(r.changed[0].origin, "default/p-a");
        assert_eq!(r.mirrors.map(|m| m.len()), Some(1));
        // b comes: reported in full, a by UID, the mirror pods not at all.
        assert!(s.apply(Event::Apply(pod("b", false))));
        let r = s.report();
        let uids: Vec<_> = r
            .changed
            .iter()
            .map(|p| pod::uid(&p.pod).to_owned())
            .collect();
        assert_eq!(uids, ["b"]);
        assert_eq!(r.unchanged, ["a"]);
        assert!(r.mirrors.is_none());
        // Its status changes (the agent's own patch): kept, nothing to report.
        let mut running = pod("b", false);
        running.status = Some(k8s::PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        assert!(!s.apply(Event::Apply(running)));
        let mut labelled = pod("b", false);
        labelled.metadata.labels = Some(BTreeMap::from([("a".to_string(), "b".to_string())]));
        assert!(s.apply(Event::Apply(labelled)), "a label is news");
        assert_eq!(s.report().changed.len(), 1);
        // A relist (after 410 Gone): c appeared and a went while the watch was down.
        assert!(!s.apply(Event::Init));
        assert!(!s.apply(Event::InitApply(pod("b", false))));
        assert!(!s.apply(Event::InitApply(pod("c", false))));
        assert!(!s.apply(Event::InitApply(pod("m", true))));
        assert_eq!(s.pods.len(), 3, "the old set stands until the list is done");
        assert!(s.apply(Event::InitDone));
        let r = s.report();
        let uids: Vec<_> = r
            .changed
            .iter()
            .map(|p| pod::uid(&p.pod).to_owned())
            .collect();
        assert_eq!(uids, ["b", "c"], "after a list, everything in full");
        assert!(r.unchanged.is_empty());
        assert!(r.mirrors.is_some());
        assert!(s.apply(Event::Delete(pod("b", false))));
        assert_eq!(s.report().unchanged, ["c"]);
    }
}
