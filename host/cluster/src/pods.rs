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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use wasmlet_agent::pod;
use wasmlet_agent::syncloop::SourceSet;
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

/// Where a pod came from, for problems the merger reports: `namespace/name`.
fn origin(p: &k8s::Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

/// What the watch has shown so far, by UID.
#[derive(Debug, Default)]
struct Store {
    pods: BTreeMap<String, k8s::Pod>,
    /// Objects of a list in progress (between `Init` and `InitDone`).
    listing: Option<BTreeMap<String, k8s::Pod>>,
}

impl Store {
    /// Applies one event; returns whether the set to report changed.
    fn apply(&mut self, event: Event<k8s::Pod>) -> bool {
        let uid = |p: &k8s::Pod| p.metadata.uid.clone().unwrap_or_default();
        match event {
            Event::Apply(p) => {
                self.pods.insert(uid(&p), p);
                true
            }
            Event::Delete(p) => self.pods.remove(&uid(&p)).is_some(),
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
                true
            }
        }
    }

    /// The pods to run, and the mirror pods.
    fn split(&self) -> (Vec<SourcePod>, Vec<k8s::Pod>) {
        let mut run = Vec::new();
        let mut mirrors = Vec::new();
        for p in self.pods.values() {
            if pod::is_mirror(p) {
                mirrors.push(p.clone());
            } else {
                run.push(SourcePod {
                    origin: origin(p),
                    pod: p.clone(),
                });
            }
        }
        (run, mirrors)
    }
}

/// Lists and watches the pods bound to `node` until `shutdown` turns true, sending each
/// new set to `sink` and the mirror pods to `mirrors`.
pub async fn run(
    client: kube::Client,
    node: String,
    sink: mpsc::Sender<SourceSet>,
    mirrors: Arc<MirrorPods>,
    mut shutdown: watch::Receiver<bool>,
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
            _ = shutdown.changed() => return,
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
            let (run, mirror) = store.split();
            mirrors.set(mirror);
            let set = SourceSet {
                source: pod::API_SOURCE.into(),
                pods: run,
                problems: Vec::new(),
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
                _ = shutdown.changed() => return,
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
    fn a_relist_replaces_the_set_and_mirror_pods_are_kept_apart() {
        let mut s = Store::default();
        assert!(s.apply(Event::Apply(pod("a", false))));
        assert!(s.apply(Event::Apply(pod("m", true))));
        assert!(!s.apply(Event::Delete(pod("x", false))), "never seen");
        // A relist (after 410 Gone): b appeared and a went while the watch was down.
        assert!(!s.apply(Event::Init));
        assert!(!s.apply(Event::InitApply(pod("b", false))));
        assert!(!s.apply(Event::InitApply(pod("m", true))));
        assert_eq!(s.pods.len(), 2, "the old set stands until the list is done");
        assert!(s.apply(Event::InitDone));
        let (run, mirrors) = s.split();
        let uids: Vec<_> = run.iter().map(|p| pod::uid(&p.pod).to_owned()).collect();
        assert_eq!(uids, ["b"]);
        assert_eq!(run[0].origin, "default/p-b");
        assert_eq!(mirrors.len(), 1);
        assert!(s.apply(Event::Delete(pod("b", false))));
        assert!(s.split().0.is_empty());
    }
}
