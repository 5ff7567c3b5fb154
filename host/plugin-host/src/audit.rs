//! What an admission policy says of the pods a node already runs: each pod asked about
//! as if it were being admitted now beside the others, nothing done to any of them. A
//! node audits a cluster policy when a version of it begins serving, so an operator sees
//! what enforcing it would reject before it does ([`crate::AdmissionChain::audit`]).
//!
//! [`Admitted`] is the node's list of admitted pods as the policies see them: the load a
//! new pod is admitted beside, and the pods an audit asks about.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1 as k8s;

use crate::admission::{Admission, NodeLoad};
use crate::bindings::exports::wasmlet::plugin::admission::Rejection;
use crate::bindings::wasmlet::plugin::types::{Node, Pod};
use crate::convert;

/// How many of the pods a policy would reject an audit names.
pub const AUDIT_NAMED: usize = 5;

/// One admitted pod: as the policies see it, and whole (for a policy that asks for
/// its JSON).
struct AdmittedPod {
    pod: Arc<Pod>,
    whole: Arc<k8s::Pod>,
}

/// The pods a node has admitted, by UID. Shared by the sync loop, which adds and takes
/// them out, and the audits, which read them.
#[derive(Default)]
pub struct Admitted {
    pods: Mutex<BTreeMap<String, AdmittedPod>>,
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("pods", &self.lock().len())
            .finish()
    }
}

impl Admitted {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, AdmittedPod>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records pod `whole` (UID `uid`), `pod` as the policies saw it.
    pub fn insert(&self, uid: &str, pod: Arc<Pod>, whole: Arc<k8s::Pod>) {
        self.lock()
            .insert(uid.to_owned(), AdmittedPod { pod, whole });
    }

    /// Takes pod `uid` out.
    pub fn remove(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// How many pods are admitted.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no pod is admitted.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The load the admitted pods put on the node: what a new pod is admitted beside.
    pub fn load(&self) -> NodeLoad {
        convert::load(self.lock().values().map(|p| &*p.pod))
    }

    /// Each admitted pod's admission onto `node` beside all the others, with its
    /// `namespace/name`, in UID order.
    pub fn admissions(&self, node: &Arc<Node>) -> Vec<(String, Arc<Admission>)> {
        let pods: Vec<(String, Arc<Pod>, Arc<k8s::Pod>)> = self
            .lock()
            .iter()
            .map(|(uid, p)| (uid.clone(), p.pod.clone(), p.whole.clone()))
            .collect();
        pods.iter()
            .map(|(uid, pod, whole)| {
                let others = pods.iter().filter(|o| &o.0 != uid).map(|o| &*o.1);
                let whole = whole.clone();
                let admission = Admission::new(
                    pod.clone(),
                    node.clone(),
                    convert::load(others),
                    move || serde_json::to_string(&*whole).unwrap_or_default(),
                );
                (format!("{}/{}", pod.namespace, pod.name), admission)
            })
            .collect()
    }
}

/// One pod a policy would reject (as a node's WasmletNode and the controller's counts
/// write it, too).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditedPod {
    /// `namespace/name`.
    pub pod: String,
    /// The rejection's reason.
    pub reason: String,
    /// Its message.
    #[serde(default)]
    pub message: String,
}

/// What a policy said of the pods a node runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audit {
    /// The pods asked about.
    pub pods: u64,
    /// Of those, the pods it would reject.
    pub would_reject: u64,
    /// The first [`AUDIT_NAMED`] of them.
    pub rejected: Vec<AuditedPod>,
}

impl Audit {
    /// Counts a pod asked about, and the rejection the policy would give it.
    pub(crate) fn add(&mut self, pod: &str, rejection: Option<Rejection>) {
        self.pods += 1;
        let Some(r) = rejection else {
            return;
        };
        self.would_reject += 1;
        if self.rejected.len() < AUDIT_NAMED {
            self.rejected.push(AuditedPod {
                pod: pod.to_owned(),
                reason: r.reason,
                message: r.message,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, cpu: &str, host_port: Option<i32>) -> (Arc<Pod>, Arc<k8s::Pod>) {
        let mut container = json!({"name": "app", "image": "busybox",
            "resources": {"requests": {"cpu": cpu}}});
        if let Some(port) = host_port {
            container["ports"] = json!([{"containerPort": 80, "hostPort": port}]);
        }
        let whole: k8s::Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}")},
            "spec": {"containers": [container]},
        }))
        .expect("pod");
        let converted = convert::pod(&whole, "api").expect("converted");
        (Arc::new(converted), Arc::new(whole))
    }

    #[test]
    fn each_pod_is_asked_about_beside_the_others_only() {
        let admitted = Admitted::default();
        for (name, cpu, port) in [
            ("a", "100m", Some(8080)),
            ("b", "200m", None),
            ("c", "300m", None),
        ] {
            let (p, whole) = pod(name, cpu, port);
            admitted.insert(&format!("uid-{name}"), p, whole);
        }
        admitted.remove("uid-c");
        assert_eq!(admitted.len(), 2);
        assert_eq!(admitted.load().usage.pod_count, 2);
        let node: k8s::Node =
            serde_json::from_value(json!({"metadata": {"name": "n"}})).expect("node");
        let node = Arc::new(convert::node(&node).expect("node"));
        let asked = admitted.admissions(&node);
        let names: Vec<&str> = asked.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["team/a", "team/b"]);
        let (a, b) = (&asked[0].1, &asked[1].1);
        assert_eq!(a.load().usage.pod_count, 1, "a beside b only");
        assert!(
            a.load().host_ports.is_empty(),
            "a's own port is not in its load"
        );
        assert_eq!(b.load().host_ports.len(), 1, "b beside a and its host port");
        assert!(b.json().contains("\"name\":\"b\""));
    }

    #[test]
    fn an_audit_counts_every_pod_and_names_the_first_few() {
        let mut audit = Audit::default();
        let no = |i: usize| Rejection {
            reason: "Denied".into(),
            message: format!("pod {i}"),
        };
        for i in 0..8 {
            audit.add(&format!("ns/p{i}"), (i % 4 != 0).then(|| no(i)));
        }
        assert_eq!((audit.pods, audit.would_reject), (8, 6));
        let named: Vec<&str> = audit.rejected.iter().map(|p| p.pod.as_str()).collect();
        assert_eq!(named, ["ns/p1", "ns/p2", "ns/p3", "ns/p5", "ns/p6"]);
        assert_eq!(audit.rejected[0].message, "pod 1");
    }
}
