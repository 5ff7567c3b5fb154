//! `resource-fit`: the kubelet's resource admission check. A pod is refused when the node
//! cannot hold it beside the pods already admitted: too many pods, or not enough cpu,
//! memory, ephemeral-storage or an extended resource. The rejection is the kubelet's:
//! reason `OutOf<resource>` (`OutOfcpu`, `OutOfpods`, …), message `Node didn't have
//! enough resource: cpu, requested: 2000, used: 500, capacity: 2000`.
//!
//! The decision itself is in `fit.rs`, which the host's benchmark also compiles natively
//! to compare the two.

use wasmlet_plugin_sdk::admission::*;
use wasmlet_plugin_sdk::resources;

mod fit;

struct ResourceFit;

impl AdmissionPolicy for ResourceFit {
    fn admit(pod: Pod, node: Node, usage: NodeUsage) -> Verdict {
        fit::admit(&pod, &node, &usage)
    }
}

wasmlet_plugin_sdk::export_admission_policy!(ResourceFit);
