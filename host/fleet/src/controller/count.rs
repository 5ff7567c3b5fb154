//! A WasmletPlugin's counts from the nodes' entries: for its current generation, the
//! wasmlet nodes its selector picks, how many serve it (and of those how many a trusted
//! key verified), how many refused it — the first few by name with why — and how many
//! have not said yet. What the DaemonSet controller writes of its pods, for plugins.
//! For an admission policy, summed over the nodes serving the generation: the pods
//! admitted that it would have rejected in Monitor mode, and its audit — the running
//! pods it would reject, the first few named with their node.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::object::Selector;
use crate::status::{Audit, Entry, State};

/// How many failures the counts name.
pub const FAILURES_SHOWN: usize = 5;

/// One failing node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The node.
    pub node_name: String,
    /// Its message.
    #[serde(default)]
    pub message: String,
}

/// The counts in a WasmletPlugin's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// The generation counted.
    pub observed_generation: i64,
    /// wasmlet nodes the selector picks.
    pub selected: u64,
    /// Of those, serving this generation.
    pub serving: u64,
    /// Of those serving, verified by a trusted key.
    pub verified: u64,
    /// Refused this generation.
    pub failed: u64,
    /// Not said yet.
    pub pending: u64,
    /// The first [`FAILURES_SHOWN`] failing nodes by name.
    #[serde(default)]
    pub failures: Vec<Failure>,
    /// Monitor mode: pods admitted on the nodes serving this generation that it would
    /// have rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_reject: Option<u64>,
    /// An admission policy: what this generation said of the pods running on the nodes
    /// serving it, when it began serving there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditCounts>,
}

/// The audits of one generation, over the nodes that made one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditCounts {
    /// Nodes that audited it.
    pub nodes: u64,
    /// The pods they ran.
    pub pods: u64,
    /// Of those, the pods it would reject.
    pub would_reject: u64,
    /// The first [`FAILURES_SHOWN`] of them, with their node.
    #[serde(default)]
    pub rejected: Vec<RejectedOn>,
}

/// A running pod a policy would reject, on its node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RejectedOn {
    /// The node.
    pub node_name: String,
    /// The pod and why.
    #[serde(flatten)]
    pub rejected: wasmlet_plugin_host::AuditedPod,
}

impl AuditCounts {
    /// Adds node `node`'s audit.
    fn add(&mut self, node: &str, audit: &Audit) {
        self.nodes += 1;
        self.pods += audit.pods;
        self.would_reject += audit.would_reject;
        let room = FAILURES_SHOWN.saturating_sub(self.rejected.len());
        self.rejected
            .extend(audit.rejected.iter().take(room).map(|p| RejectedOn {
                node_name: node.to_owned(),
                rejected: p.clone(),
            }));
    }
}

impl Counts {
    /// Whether every selected node has said what it does with this generation.
    pub fn settled(&self) -> bool {
        self.pending == 0
    }

    /// Whether `other` says the same but for what Monitor mode would have rejected.
    pub fn differs_only_in_monitored(&self, other: &Counts) -> bool {
        self.would_reject != other.would_reject
            && Counts {
                would_reject: other.would_reject,
                ..self.clone()
            } == *other
    }
}

/// One wasmlet node as the counts see it.
pub struct Seen<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its Node's labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Its entry for the plugin, if any.
    pub entry: Option<&'a Entry>,
}

/// The counts of a plugin at `generation` whose nodes are picked by `selector` (every
/// node when it cannot be read: each of them says so in a Failed entry), over `nodes`
/// in name order.
pub fn count<'a>(
    generation: i64,
    selector: Option<&Selector>,
    nodes: impl IntoIterator<Item = Seen<'a>>,
) -> Counts {
    let mut c = Counts {
        observed_generation: generation,
        ..Counts::default()
    };
    for node in nodes {
        if selector.is_some_and(|s| !s.matches(node.labels)) {
            continue;
        }
        c.selected += 1;
        let Some(e) = node.entry.filter(|e| e.observed_generation == generation) else {
            c.pending += 1;
            continue;
        };
        match e.state {
            State::Loaded => {
                c.serving += 1;
                c.verified += u64::from(e.verified.is_some());
                if let Some(n) = e.would_reject {
                    *c.would_reject.get_or_insert(0) += n;
                }
                if let Some(a) = &e.audit {
                    c.audit.get_or_insert_default().add(node.name, a);
                }
            }
            State::Failed => {
                c.failed += 1;
                if c.failures.len() < FAILURES_SHOWN {
                    c.failures.push(Failure {
                        node_name: node.name.to_owned(),
                        message: e.message.clone(),
                    });
                }
            }
            State::Pending => c.pending += 1,
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(generation: i64, state: State) -> Entry {
        Entry {
            name: "policy".into(),
            observed_generation: generation,
            digest: None,
            state,
            message: format!("{state:?} at {generation}"),
            last_transition_time: String::new(),
            verified: None,
            would_reject: None,
            audit: None,
        }
    }

    #[test]
    fn nodes_are_counted_at_the_current_generation_among_those_selected() {
        let canary = BTreeMap::from([("canary".to_owned(), "true".to_owned())]);
        let plain = BTreeMap::new();
        let mut signed = entry(2, State::Loaded);
        signed.verified = Some("sha256:0123456789abcdef".into());
        let entries = [
            entry(2, State::Loaded),
            entry(2, State::Failed),
            entry(1, State::Loaded),
            entry(2, State::Pending),
            signed,
            entry(2, State::Failed),
        ];
        let names = ["a", "b", "c", "d", "e", "f"];
        let seen = || {
            names
                .iter()
                .zip(&entries)
                .map(|(n, e)| Seen {
                    name: n,
                    labels: if *n == "f" { &plain } else { &canary },
                    entry: Some(e),
                })
                .chain([Seen {
                    name: "g",
                    labels: &canary,
                    entry: None,
                }])
        };
        let selector = Selector {
            match_labels: canary.clone(),
            ..Selector::default()
        };
        let c = count(2, Some(&selector), seen());
        assert_eq!(
            (c.selected, c.serving, c.verified, c.failed, c.pending),
            (6, 2, 1, 1, 3),
            "f is not selected; c (old generation), d (pending) and g (nothing yet) are pending"
        );
        assert_eq!(
            c.failures,
            [Failure {
                node_name: "b".into(),
                message: "Failed at 2".into()
            }]
        );
        assert!(!c.settled());
        let all = count(2, None, seen());
        assert_eq!((all.selected, all.failed, all.failures.len()), (7, 2, 2));
    }

    /// An audit of `pods` pods on which `rejected` (by name) would be refused.
    fn audit(pods: u64, rejected: &[&str]) -> Audit {
        Audit {
            digest: "sha256:ab".into(),
            time: String::new(),
            pods,
            would_reject: rejected.len() as u64,
            rejected: rejected
                .iter()
                .map(|p| wasmlet_plugin_host::AuditedPod {
                    pod: (*p).into(),
                    reason: "NodePorts".into(),
                    message: String::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn monitored_rejections_and_audits_are_summed_over_the_nodes_serving_the_generation() {
        let labels = BTreeMap::new();
        let mut a = entry(3, State::Loaded);
        a.would_reject = Some(4);
        a.audit = Some(audit(10, &["t/a1", "t/a2", "t/a3"]));
        let mut b = entry(3, State::Loaded);
        b.would_reject = Some(1);
        b.audit = Some(audit(7, &["t/b1", "t/b2", "t/b3"]));
        let mut old = entry(2, State::Loaded);
        old.would_reject = Some(100);
        old.audit = Some(audit(9, &["t/c1"]));
        let quiet = entry(3, State::Loaded);
        let nodes = [("a", &a), ("b", &b), ("c", &old), ("d", &quiet)];
        let c = count(
            3,
            None,
            nodes.iter().map(|(n, e)| Seen {
                name: n,
                labels: &labels,
                entry: Some(*e),
            }),
        );
        assert_eq!(c.would_reject, Some(5), "c serves another generation");
        let audit = c.audit.clone().expect("audited");
        assert_eq!((audit.nodes, audit.pods, audit.would_reject), (2, 17, 6));
        let named: Vec<(&str, &str)> = audit
            .rejected
            .iter()
            .map(|r| (r.node_name.as_str(), r.rejected.pod.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("a", "t/a1"),
                ("a", "t/a2"),
                ("a", "t/a3"),
                ("b", "t/b1"),
                ("b", "t/b2")
            ]
        );
        let text = serde_json::to_value(&c).expect("json");
        assert_eq!(text["audit"]["wouldReject"], 6);
        assert_eq!(text["wouldReject"], 5);
        let plain = count(
            3,
            None,
            [Seen {
                name: "d",
                labels: &labels,
                entry: Some(&quiet),
            }],
        );
        let text = serde_json::to_value(&plain).expect("json");
        assert!(text.get("audit").is_none() && text.get("wouldReject").is_none());
    }

    #[test]
    fn failures_shown_are_the_first_few_and_the_counts_read_back() {
        let failed = entry(1, State::Failed);
        let labels = BTreeMap::new();
        let names: Vec<String> = (0..8).map(|i| format!("n{i}")).collect();
        let c = count(
            1,
            None,
            names.iter().map(|n| Seen {
                name: n,
                labels: &labels,
                entry: Some(&failed),
            }),
        );
        assert_eq!(c.failed, 8);
        assert!(c.settled());
        assert_eq!(
            c.failures
                .iter()
                .map(|f| f.node_name.as_str())
                .collect::<Vec<_>>(),
            ["n0", "n1", "n2", "n3", "n4"]
        );
        let text = serde_json::to_value(&c).expect("json");
        assert_eq!(text["observedGeneration"], 1);
        assert_eq!(serde_json::from_value::<Counts>(text).expect("back"), c);
    }
}
