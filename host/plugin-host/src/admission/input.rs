//! What a policy decides on: one pod's [`Admission`] to the node, and what the node
//! already carries ([`NodeLoad`]).

use std::sync::Arc;

use crate::bindings::wasmlet::plugin::types::{HostPortInUse, Node, NodeUsage, Pod, ResourceList};
use crate::resources;

/// What a node carries, as admission sees it: the usage summed over its active pods
/// and the host ports they hold. Cheap to clone.
#[derive(Debug, Clone)]
pub struct NodeLoad {
    /// Summed requests and pod count.
    pub usage: NodeUsage,
    /// Host ports held.
    pub host_ports: Arc<[HostPortInUse]>,
}

/// One pod's admission: the pod, the node it would join and what that node already
/// carries. A policy reads them field by field through the `pod-view` and `node-view`
/// resources (nothing is copied into a guest that it does not ask for). Made once per
/// pod and shared by every link of a chain: what a link works out for the pod (its
/// summed requests, its JSON) is worked out once.
pub struct Admission {
    pod: Arc<Pod>,
    node: Arc<Node>,
    load: NodeLoad,
    requests: std::sync::OnceLock<ResourceList>,
    json: std::sync::OnceLock<String>,
    make_json: Box<dyn Fn() -> String + Send + Sync>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("pod", &self.pod.name)
            .field("node", &self.node.name)
            .finish()
    }
}

impl Admission {
    /// The admission of `pod` to `node`, which carries `load`. `pod_json` makes the
    /// whole pod as Kubernetes JSON; it runs only if a policy asks, and once.
    pub fn new(
        pod: impl Into<Arc<Pod>>,
        node: impl Into<Arc<Node>>,
        load: NodeLoad,
        pod_json: impl Fn() -> String + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            pod: pod.into(),
            node: node.into(),
            load,
            requests: std::sync::OnceLock::new(),
            json: std::sync::OnceLock::new(),
            make_json: Box::new(pod_json),
        })
    }

    /// The pod under admission.
    pub fn pod(&self) -> &Arc<Pod> {
        &self.pod
    }

    /// The node it would join.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// What the node already carries.
    pub fn load(&self) -> &NodeLoad {
        &self.load
    }

    /// What the pod requests, summed the kubelet's way ([`resources::pod_requests`]).
    pub fn requests(&self) -> &ResourceList {
        self.requests
            .get_or_init(|| resources::pod_requests(&self.pod))
    }

    /// The pod as JSON, made on first use.
    pub fn json(&self) -> &str {
        self.json.get_or_init(|| (self.make_json)())
    }
}
