//! Nodes from before WasmletNode: they wrote their entry into the WasmletPlugin itself
//! (`status.nodes`, keyed by `nodeName`) and one of them kept `status.summary`. During
//! an upgrade the controller counts those entries for the nodes that have no
//! WasmletNode yet, and takes out each entry whose node has one (and the old summary
//! with the last), so the object shrinks back as nodes move over.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::status::{Entries, Entry};

/// The entries older nodes wrote into plugin `plugin`'s `status`, by node.
pub fn entries(plugin: &str, status: &Value) -> BTreeMap<String, Entry> {
    status["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let node = e["nodeName"].as_str().filter(|n| !n.is_empty())?;
            let mut e = e.clone();
            e["name"] = json!(plugin);
            let entry: Entry = serde_json::from_value(e).ok()?;
            Some((node.to_owned(), entry))
        })
        .collect()
}

/// Node `node`'s entry for `plugin`: its WasmletNode's (`own`) when that has one, else
/// the one it wrote into the plugin (`old`) — a node that has just moved says in its
/// own object what its old entry said only once it has looked at the plugin again.
pub fn pick<'a>(
    own: Option<&'a Entries>,
    plugin: &str,
    old: &'a BTreeMap<String, Entry>,
    node: &str,
) -> Option<&'a Entry> {
    own.and_then(|e| e.get(plugin)).or_else(|| old.get(node))
}

/// The merge patch of `status` (at `resource_version`) that takes out the entries of
/// nodes whose WasmletNode now has theirs (`moved`) — and the old summary once no entry
/// is left — or `None` when there is nothing to take out.
pub fn cleanup(
    status: &Value,
    resource_version: &str,
    moved: impl Fn(&str) -> bool,
) -> Option<Value> {
    let nodes = status["nodes"].as_array().cloned().unwrap_or_default();
    let left: Vec<Value> = nodes
        .iter()
        .filter(|e| !moved(e["nodeName"].as_str().unwrap_or_default()))
        .cloned()
        .collect();
    let summary = status.get("summary").is_some_and(|s| !s.is_null());
    if left.len() == nodes.len() && (!left.is_empty() || !summary) {
        return None;
    }
    let mut patch = json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"nodes": left},
    });
    if left.is_empty() {
        patch["status"] = json!({"nodes": null, "summary": null});
    }
    Some(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::State;

    fn status() -> Value {
        json!({
            "nodes": [
                {"nodeName": "a", "observedGeneration": 2, "state": "Loaded", "digest": "sha256:ab"},
                {"nodeName": "b", "observedGeneration": 2, "state": "Failed", "message": "no"},
                {"nodeName": "c", "state": "Unknown"},
            ],
            "summary": {"observedGeneration": 2, "nodes": 3, "serving": 1},
        })
    }

    #[test]
    fn old_entries_are_read_by_node() {
        let read = entries("policy", &status());
        assert_eq!(read.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(read["a"].name, "policy");
        assert_eq!(read["a"].state, State::Loaded);
        assert_eq!(read["b"].message, "no");
    }

    #[test]
    fn a_node_s_own_entry_wins_and_its_old_one_stands_in_until_it_has_one() {
        let old = entries("policy", &status());
        let mut own = Entries::new();
        assert_eq!(pick(None, "policy", &old, "a"), old.get("a"));
        assert_eq!(pick(Some(&own), "policy", &old, "a"), old.get("a"));
        assert_eq!(pick(Some(&own), "policy", &old, "z"), None);
        let mut mine = old["b"].clone();
        mine.observed_generation = 3;
        own.insert("policy".into(), mine.clone());
        assert_eq!(pick(Some(&own), "policy", &old, "a"), Some(&mine));
    }

    #[test]
    fn entries_of_moved_nodes_go_and_the_summary_with_the_last() {
        let s = status();
        assert_eq!(cleanup(&s, "7", |_| false), None);
        assert_eq!(
            cleanup(&s, "7", |n| n == "a"),
            Some(
                json!({"metadata": {"resourceVersion": "7"}, "status": {"nodes": [
                    {"nodeName": "b", "observedGeneration": 2, "state": "Failed", "message": "no"},
                    {"nodeName": "c", "state": "Unknown"},
                ]}})
            )
        );
        assert_eq!(
            cleanup(&s, "7", |_| true),
            Some(
                json!({"metadata": {"resourceVersion": "7"}, "status": {"nodes": null, "summary": null}})
            )
        );
        let only_summary = json!({"summary": {"serving": 1}});
        assert!(cleanup(&only_summary, "8", |_| true).is_some());
        assert_eq!(cleanup(&json!({"serving": 3}), "9", |_| true), None);
    }
}
