//! A WasmletPlugin's counts from the nodes' entries: for its current generation, the
//! wasmlet nodes its selector picks, how many serve it (and of those how many a trusted
//! key verified), how many refused it — the first few by name with why — and how many
//! have not said yet. What the DaemonSet controller writes of its pods, for plugins.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::object::Selector;
use crate::status::{Entry, State};

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
}

impl Counts {
    /// Whether every selected node has said what it does with this generation.
    pub fn settled(&self) -> bool {
        self.pending == 0
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
