//! Mirror pods: the API server's copies of this node's static pods (from files, URLs
//! and source plugins), so that `kubectl get pods` shows them. A mirror pod carries the
//! `kubernetes.io/config.mirror` annotation set to its static pod's config hash and an
//! owner reference to the Node; its status is the static pod's. It is replaced when the
//! static pod changes (a new hash) and deleted when the static pod goes.
//!
//! [`MirrorPods`] holds the mirror pods the pod watch shows; the status sync
//! ([`crate::status`]) creates and deletes them.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use tokio::sync::Notify;
use wasmlet_core::pod::{self, PodKey};

/// The mirror pods bound to this node, as the watch last showed them, by
/// `namespace/name`.
#[derive(Debug, Default)]
pub struct MirrorPods {
    pods: Mutex<BTreeMap<String, k8s::Pod>>,
    listed: AtomicBool,
    changed: Notify,
}

impl MirrorPods {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, k8s::Pod>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the whole set the watch shows now.
    pub fn set(&self, pods: Vec<k8s::Pod>) {
        let next: BTreeMap<String, k8s::Pod> = pods
            .into_iter()
            .map(|p| (PodKey::of(&p).full_name(), p))
            .collect();
        let mut current = self.lock();
        let first = !self.listed.swap(true, Ordering::Relaxed);
        if first || *current != next {
            *current = next;
            self.changed.notify_one();
        }
    }

    /// Whether the watch has listed the node's pods at least once (before that, a
    /// missing mirror pod may just not be known yet).
    pub fn listed(&self) -> bool {
        self.listed.load(Ordering::Relaxed)
    }

    /// The mirror pod named `namespace/name`.
    pub fn get(&self, full_name: &str) -> Option<k8s::Pod> {
        self.lock().get(full_name).cloned()
    }

    /// Every mirror pod.
    pub fn all(&self) -> Vec<k8s::Pod> {
        self.lock().values().cloned().collect()
    }

    /// Waits until the set changes.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

/// The config hash a static pod's mirror carries (its `kubernetes.io/config.hash`).
pub fn hash_of(static_pod: &k8s::Pod) -> &str {
    static_pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(pod::CONFIG_HASH_ANNOTATION))
        .map_or_else(|| pod::uid(static_pod), String::as_str)
}

/// Whether `mirror` mirrors `static_pod` as it is now (same hash, not being deleted).
pub fn matches(mirror: &k8s::Pod, static_pod: &k8s::Pod) -> bool {
    mirror.metadata.deletion_timestamp.is_none()
        && mirror
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(pod::CONFIG_MIRROR_ANNOTATION))
            .is_some_and(|h| h == hash_of(static_pod))
}

/// The mirror pod to create for `static_pod`, owned by the node `owner`.
pub fn object(static_pod: &k8s::Pod, owner: &OwnerReference) -> k8s::Pod {
    let m = &static_pod.metadata;
    let mut annotations = m.annotations.clone().unwrap_or_default();
    annotations.insert(
        pod::CONFIG_MIRROR_ANNOTATION.into(),
        hash_of(static_pod).to_owned(),
    );
    k8s::Pod {
        metadata: ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            labels: m.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                controller: Some(true),
                ..owner.clone()
            }]),
            ..Default::default()
        },
        spec: static_pod.spec.clone(),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn static_pod(hash: &str) -> k8s::Pod {
        let mut p: k8s::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-node-a", "namespace": "default", "uid": hash,
                "labels": {"app": "web"},
                "annotations": {"kubernetes.io/config.hash": hash, "kubernetes.io/config.source": "file"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}
        }))
        .expect("pod");
        p.metadata.resource_version = None;
        p
    }

    #[test]
    fn a_mirror_pod_copies_the_static_pod_and_points_at_the_node() {
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: "node-a".into(),
            uid: "node-uid".into(),
            ..Default::default()
        };
        let s = static_pod("h1");
        let m = object(&s, &owner);
        assert_eq!(m.metadata.name.as_deref(), Some("web-node-a"));
        assert_eq!(m.metadata.uid, None, "the API server gives it its own UID");
        assert_eq!(m.status, None);
        assert_eq!(m.spec, s.spec);
        let refs = m.metadata.owner_references.clone().expect("owner");
        assert_eq!(refs[0].uid, "node-uid");
        assert_eq!(refs[0].controller, Some(true));
        assert!(matches(&m, &s));
        assert!(!matches(&m, &static_pod("h2")), "the static pod changed");
        let mut deleting = m.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!matches(&deleting, &s));
        assert!(pod::is_mirror(&m));
    }
}
