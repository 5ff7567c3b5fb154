//! `taint-toleration`: the kubelet's taint check at admission. Only `NoExecute` taints
//! count (the others are the scheduler's business), and static pods are exempt, as in
//! the kubelet. The rejection is the kubelet's: reason `TaintToleration`, message
//! `Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate`.

use wasmlet_plugin_sdk::admission::*;

struct TaintToleration;

/// Whether `t` tolerates `taint`: same effect (or any), same key (or any, with an
/// empty key), and a value that matches under the operator.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect.is_some_and(|e| e != taint.effect) {
        return false;
    }
    if !t.key.is_empty() && t.key != taint.key {
        return false;
    }
    match t.operator {
        TolerationOperator::Exists => true,
        TolerationOperator::Equal => t.value == taint.value,
    }
}

impl AdmissionPolicy for TaintToleration {
    fn admit(pod: &Pod, node: &Node) -> Verdict {
        if pod.static_pod() {
            return Verdict::Admit;
        }
        // The pod's tolerations are fetched only if the node has a NoExecute taint.
        let untolerated = node
            .taints()
            .iter()
            .filter(|t| t.effect == TaintEffect::NoExecute)
            .any(|taint| !pod.tolerations().iter().any(|t| tolerates(t, taint)));
        if untolerated {
            predicate_failed(
                "TaintToleration",
                "node(s) had taints that the pod didn't tolerate",
            )
        } else {
            Verdict::Admit
        }
    }
}

wasmlet_plugin_sdk::export_admission_policy!(TaintToleration);
