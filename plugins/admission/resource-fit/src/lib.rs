//! `resource-fit`: the kubelet's resource admission check. A pod is refused when the node
//! cannot hold it beside the pods already admitted: too many pods, or not enough cpu,
//! memory, ephemeral-storage or an extended resource. The rejection is the kubelet's:
//! reason `OutOf<resource>` (`OutOfcpu`, `OutOfpods`, …), message `Node didn't have
//! enough resource: cpu, requested: 2000, used: 500, capacity: 2000`.
//!
//! It reads three things of the host: the pod's requests (summed the kubelet's way:
//! init containers, sidecars, overhead), the node's allocatable and the usage of the
//! pods already there. The decision itself is in `fit.rs`, which the host's benchmark
//! also compiles natively to compare the two.

use wasmlet_plugin_sdk::admission::*;
use wasmlet_plugin_sdk::resources;

mod fit;

struct ResourceFit;

impl AdmissionPolicy for ResourceFit {
    fn admit(pod: &Pod, node: &Node) -> Verdict {
        fit::admit(pod.requests(), node.allocatable(), node.usage())
    }
}

wasmlet_plugin_sdk::export_admission_policy!(ResourceFit);
