//! `node-affinity`: the kubelet's NodeAffinity check. A pod is refused when the node's
//! labels do not satisfy its `nodeSelector` (every pair equal) and its required node
//! affinity (any one term, each term's requirements all holding). The rejection is the
//! kubelet's: reason `NodeAffinity`, message `Predicate NodeAffinity failed: node(s)
//! didn't match Pod's node affinity/selector`.

use wasmlet_plugin_sdk::admission::*;

struct NodeAffinity;

/// One requirement against a value (`None`: the label or field is absent).
fn holds(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let number = |s: &str| s.parse::<i64>().ok();
    match req.operator {
        SelectorOperator::In => value.is_some_and(|v| req.values.iter().any(|x| x == v)),
        SelectorOperator::NotIn => value.is_none_or(|v| req.values.iter().all(|x| x != v)),
        SelectorOperator::Exists => value.is_some(),
        SelectorOperator::DoesNotExist => value.is_none(),
        SelectorOperator::Gt | SelectorOperator::Lt => {
            let ([bound], Some(have)) = (req.values.as_slice(), value.and_then(number)) else {
                return false;
            };
            match (number(bound), &req.operator) {
                (Some(bound), SelectorOperator::Gt) => have > bound,
                (Some(bound), _) => have < bound,
                (None, _) => false,
            }
        }
    }
}

/// A term matches when it has at least one requirement and all of them hold. The only
/// node field a term may name is `metadata.name`.
fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    if term.match_expressions.is_empty() && term.match_fields.is_empty() {
        return false;
    }
    term.match_expressions
        .iter()
        .all(|r| holds(r, node.label(&r.key)))
        && term.match_fields.iter().all(|r| {
            let field = (r.key == "metadata.name").then(|| node.name());
            holds(r, field)
        })
}

impl AdmissionPolicy for NodeAffinity {
    fn admit(pod: &Pod, node: &Node) -> Verdict {
        // The node's labels are fetched only for a pod that has a selector or terms.
        let selector = pod
            .node_selector()
            .iter()
            .all(|(k, v)| node.label(k) == Some(v.as_str()));
        let terms = pod.required_node_affinity();
        let affinity = terms.is_empty() || terms.iter().any(|t| term_matches(t, node));
        if selector && affinity {
            Verdict::Admit
        } else {
            predicate_failed(
                "NodeAffinity",
                "node(s) didn't match Pod's node affinity/selector",
            )
        }
    }
}

wasmlet_plugin_sdk::export_admission_policy!(NodeAffinity);
