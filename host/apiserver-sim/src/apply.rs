//! Server-side apply: `PATCH` with `application/apply-patch+yaml`, `fieldManager`
//! required, `force` optional.
//!
//! Each manager's applied fields are recorded in `metadata.managedFields` (operation
//! `Apply`, `fieldsType: FieldsV1`, `subresource: status` for the status subresource), in
//! the API server's notation: `f:<field>` for a field, `k:{"<key>":"<value>"}` for an item
//! of a list whose schema says `x-kubernetes-list-type: map`, `.` for the field itself
//! when it has owned children too. An apply then:
//! - conflicts (409 `Conflict`, one cause per field) when it sets a field another
//!   applier owns to a different value — unless `force=true`, which takes the field over;
//! - removes the fields this manager applied last time and no longer applies, unless
//!   another applier owns them (so a node dropping its own entry of a keyed list removes
//!   just that entry);
//! - merges the rest: objects field by field, keyed lists item by item, any other list or
//!   value replaced.
//!
//! Writes that are not applies are not recorded as managers (the API server records them
//! as `Update` entries; no client of the double reads those).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::store::{now_rfc3339, status};

/// A set of fields, in the API server's FieldsV1 shape.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Fields {
    /// The field itself is in the set.
    own: bool,
    /// Its children by path element (`f:name`, `k:{...}`).
    children: BTreeMap<String, Fields>,
}

/// The metadata a manager never owns.
const SERVER_METADATA: [&str; 8] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
];

impl Fields {
    /// The fields `value` sets, at `path` (field names) in a schema with `maps`.
    fn of(value: &Value, path: &mut Vec<String>, maps: &[(Vec<String>, Vec<String>)]) -> Fields {
        match value {
            Value::Object(object) if !object.is_empty() => {
                let mut children = BTreeMap::new();
                for (k, v) in object {
                    if v.is_null()
                        || (path == &["metadata"] && SERVER_METADATA.contains(&k.as_str()))
                    {
                        continue;
                    }
                    path.push(k.clone());
                    let fields = Fields::of(v, path, maps);
                    path.pop();
                    // An empty keyed list sets nothing.
                    if fields.own || !fields.children.is_empty() {
                        children.insert(format!("f:{k}"), fields);
                    }
                }
                Fields {
                    own: false,
                    children,
                }
            }
            Value::Array(items) => match maps.iter().find(|(p, _)| p == path) {
                Some((_, keys)) => {
                    let mut children = BTreeMap::new();
                    for item in items {
                        let mut fields = Fields::of(item, path, maps);
                        fields.own = true;
                        children.insert(item_key(item, keys), fields);
                    }
                    // The list is everyone's; its items are their appliers'.
                    Fields {
                        own: false,
                        children,
                    }
                }
                None => Fields::leaf(),
            },
            _ => Fields::leaf(),
        }
    }

    fn leaf() -> Fields {
        Fields {
            own: true,
            children: BTreeMap::new(),
        }
    }

    /// FieldsV1 JSON.
    fn to_json(&self) -> Value {
        let mut out = Map::new();
        if self.own && !self.children.is_empty() {
            out.insert(".".into(), json!({}));
        }
        for (k, v) in &self.children {
            out.insert(k.clone(), v.to_json());
        }
        Value::Object(out)
    }

    fn from_json(value: &Value) -> Fields {
        let object = value.as_object().cloned().unwrap_or_default();
        let children: BTreeMap<String, Fields> = object
            .iter()
            .filter(|(k, _)| *k != ".")
            .map(|(k, v)| (k.clone(), Fields::from_json(v)))
            .collect();
        Fields {
            own: object.is_empty() || object.contains_key("."),
            children,
        }
    }

    fn union(&mut self, other: &Fields) {
        self.own |= other.own;
        for (k, v) in &other.children {
            self.children.entry(k.clone()).or_default().union(v);
        }
    }

    /// The owned fields, by path.
    fn leaves(&self, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.own {
            out.push(path.clone());
        }
        for (k, v) in &self.children {
            path.push(k.clone());
            v.leaves(path, out);
            path.pop();
        }
    }

    fn contains(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => self.own,
            Some((first, rest)) => self.children.get(first).is_some_and(|c| c.contains(rest)),
        }
    }

    fn remove(&mut self, path: &[String]) {
        match path.split_first() {
            None => self.own = false,
            Some((first, rest)) => {
                if let Some(child) = self.children.get_mut(first) {
                    child.remove(rest);
                    if !child.own && child.children.is_empty() {
                        self.children.remove(first);
                    }
                }
            }
        }
    }
}

/// `k:{"key":value,...}` for a keyed list's item.
fn item_key(item: &Value, keys: &[String]) -> String {
    let key: Map<String, Value> = keys.iter().map(|k| (k.clone(), item[k].clone())).collect();
    format!("k:{}", Value::Object(key))
}

/// The value at path element `elem` below `value`.
fn child<'a>(value: &'a Value, elem: &str) -> Option<&'a Value> {
    if let Some(field) = elem.strip_prefix("f:") {
        return value.get(field);
    }
    let key: Map<String, Value> = serde_json::from_str(elem.strip_prefix("k:")?).ok()?;
    value
        .as_array()?
        .iter()
        .find(|item| key.iter().all(|(k, v)| item[k] == *v))
}

fn at<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, elem| child(v, elem))
}

/// Removes from `value` what `gone` owns and `keep` does not reach.
fn prune(value: &mut Value, gone: &Fields, keep: Option<&Fields>) {
    for (elem, sub) in &gone.children {
        let kept = keep.and_then(|k| k.children.get(elem));
        if sub.own && kept.is_none() {
            drop_child(value, elem);
            continue;
        }
        if let Some(field) = elem.strip_prefix("f:") {
            if let Some(v) = value.get_mut(field) {
                prune(v, sub, kept);
                // A map the manager set whose fields all went goes with them.
                if kept.is_none() && v.as_object().is_some_and(|o| o.is_empty()) {
                    drop_child(value, elem);
                }
            }
        } else if let Some(items) = value.as_array_mut()
            && let Ok(key) =
                serde_json::from_str::<Map<String, Value>>(elem.trim_start_matches("k:"))
            && let Some(item) = items
                .iter_mut()
                .find(|item| key.iter().all(|(k, v)| item[k] == *v))
        {
            prune(item, sub, kept);
        }
    }
}

fn drop_child(value: &mut Value, elem: &str) {
    if let Some(field) = elem.strip_prefix("f:") {
        if let Some(object) = value.as_object_mut() {
            object.remove(field);
        }
    } else if let (Some(items), Ok(key)) = (
        value.as_array_mut(),
        serde_json::from_str::<Map<String, Value>>(elem.trim_start_matches("k:")),
    ) {
        items.retain(|item| !key.iter().all(|(k, v)| item[k] == *v));
    }
}

/// Merges `applied` into `target` at `path`: objects by field, keyed lists by item.
fn merge(
    target: &mut Value,
    applied: &Value,
    path: &mut Vec<String>,
    maps: &[(Vec<String>, Vec<String>)],
) {
    match applied {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            for (k, v) in fields {
                if v.is_null() {
                    continue;
                }
                path.push(k.clone());
                merge(
                    target
                        .as_object_mut()
                        .map(|o| o.entry(k.clone()).or_insert(Value::Null))
                        .expect("object"),
                    v,
                    path,
                    maps,
                );
                path.pop();
            }
        }
        Value::Array(items) => match maps.iter().find(|(p, _)| p == path) {
            Some((_, keys)) => {
                if !target.is_array() {
                    *target = Value::Array(Vec::new());
                }
                let list = target.as_array_mut().expect("array");
                for item in items {
                    let found = list
                        .iter_mut()
                        .find(|t| keys.iter().all(|k| t[k] == item[k]));
                    match found {
                        Some(existing) => merge(existing, item, path, maps),
                        None => list.push(item.clone()),
                    }
                }
            }
            None => *target = applied.clone(),
        },
        other => *target = other.clone(),
    }
}

/// One manager's entry in `metadata.managedFields`.
struct Managed {
    manager: String,
    subresource: String,
    fields: Fields,
    entry: Value,
}

fn managed(object: &Value) -> Vec<Managed> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| Managed {
            manager: e["manager"].as_str().unwrap_or_default().to_owned(),
            subresource: e["subresource"].as_str().unwrap_or_default().to_owned(),
            fields: Fields::from_json(&e["fieldsV1"]),
            entry: e.clone(),
        })
        .collect()
}

/// The object after `manager` applies `applied` to `current` (on the `status`
/// subresource when `sub` says so), or the API server's error.
pub(crate) fn apply(
    current: &Value,
    applied: &Value,
    manager: &str,
    force: bool,
    sub: Option<&str>,
    maps: &[(Vec<String>, Vec<String>)],
) -> Result<Value, Value> {
    if manager.is_empty() {
        return Err(status(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into(),
        ));
    }
    let subresource = sub.unwrap_or_default();
    // The status subresource takes status only; the main resource everything else.
    let mut applied = applied.clone();
    if let Some(object) = applied.as_object_mut() {
        object.remove("apiVersion");
        object.remove("kind");
        if subresource == "status" {
            object.retain(|k, _| k == "status");
        } else if object.contains_key("status") && current.get("status").is_some() {
            object.remove("status");
        }
    }
    let new = Fields::of(&applied, &mut Vec::new(), maps);
    let mut others = managed(current);
    let previous = others
        .iter()
        .position(|m| m.manager == manager && m.subresource == subresource)
        .map(|i| others.remove(i).fields)
        .unwrap_or_default();

    conflicts(current, &applied, &new, &mut others, force)?;

    // What this manager no longer applies goes, unless someone else holds it.
    let mut keep = new.clone();
    for other in &others {
        keep.union(&other.fields);
    }
    let mut object = current.clone();
    prune(&mut object, &previous, Some(&keep));
    merge(&mut object, &applied, &mut Vec::new(), maps);

    let entries = managed_fields(others, &new, manager, subresource, &current["apiVersion"]);
    object["metadata"]["managedFields"] = Value::Array(entries);
    Ok(object)
}

/// Checks the fields `new` sets against those other appliers own: a field set to
/// something else is a 409 Conflict naming each (or, forced, taken from its owner).
fn conflicts(
    current: &Value,
    applied: &Value,
    new: &Fields,
    others: &mut [Managed],
    force: bool,
) -> Result<(), Value> {
    let mut leaves = Vec::new();
    new.leaves(&mut Vec::new(), &mut leaves);
    let mut conflicts = Vec::new();
    for leaf in leaves.iter().filter(|l| !l.is_empty()) {
        if at(current, leaf) == at(applied, leaf) {
            continue;
        }
        for other in others.iter_mut().filter(|o| o.fields.contains(leaf)) {
            if force {
                other.fields.remove(leaf);
            } else {
                conflicts.push((other.manager.clone(), dotted(leaf)));
            }
        }
    }
    if conflicts.is_empty() {
        return Ok(());
    }
    let mut s = status(
        409,
        "Conflict",
        format!(
            "Apply failed with {} conflict{}: {}",
            conflicts.len(),
            if conflicts.len() == 1 { "" } else { "s" },
            conflicts
                .iter()
                .map(|(m, f)| format!("conflict with \"{m}\": {f}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    );
    s["details"] = json!({"causes": conflicts.iter().map(|(m, f)| json!({
        "reason": "FieldManagerConflict", "message": format!("conflict with \"{m}\""), "field": f,
    })).collect::<Vec<_>>()});
    Err(s)
}

/// The object's managedFields after the apply: the other managers' entries that still
/// own something, then this manager's.
fn managed_fields(
    others: Vec<Managed>,
    new: &Fields,
    manager: &str,
    subresource: &str,
    api_version: &Value,
) -> Vec<Value> {
    let mut entries: Vec<Value> = others
        .into_iter()
        .filter(|o| !o.fields.children.is_empty() || o.fields.own)
        .map(|o| {
            let mut e = o.entry;
            e["fieldsV1"] = o.fields.to_json();
            e
        })
        .collect();
    if !new.children.is_empty() {
        let mut entry = json!({
            "manager": manager,
            "operation": "Apply",
            "apiVersion": api_version.clone(),
            "time": now_rfc3339(),
            "fieldsType": "FieldsV1",
            "fieldsV1": new.to_json(),
        });
        if !subresource.is_empty() {
            entry["subresource"] = json!(subresource);
        }
        entries.push(entry);
    }
    entries
}

/// `.status.nodes[nodeName="a"].state` for a field path.
fn dotted(path: &[String]) -> String {
    path.iter()
        .map(|elem| match elem.strip_prefix("f:") {
            Some(field) => format!(".{field}"),
            None => {
                let key: Map<String, Value> =
                    serde_json::from_str(elem.trim_start_matches("k:")).unwrap_or_default();
                let inner = key
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",");
                format!("[{inner}]")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maps() -> Vec<(Vec<String>, Vec<String>)> {
        vec![(
            vec!["status".into(), "nodes".into()],
            vec!["nodeName".into()],
        )]
    }

    fn entry(node: &str, state: &str) -> Value {
        json!({"status": {"nodes": [{"nodeName": node, "state": state}]}})
    }

    #[test]
    fn each_manager_keeps_its_own_entry_of_a_keyed_list() {
        let object = json!({"apiVersion": "wasmlet.dev/v1alpha1", "metadata": {"name": "p"}, "spec": {"a": 1}});
        let sub = Some("status");
        let object = apply(
            &object,
            &entry("a", "Pending"),
            "node/a",
            true,
            sub,
            &maps(),
        )
        .expect("applied");
        let object =
            apply(&object, &entry("b", "Loaded"), "node/b", true, sub, &maps()).expect("applied");
        let object =
            apply(&object, &entry("a", "Loaded"), "node/a", true, sub, &maps()).expect("applied");
        assert_eq!(
            object["status"]["nodes"],
            json!([{"nodeName": "a", "state": "Loaded"}, {"nodeName": "b", "state": "Loaded"}])
        );
        assert_eq!(
            object["spec"],
            json!({"a": 1}),
            "status applies leave the spec"
        );
        // A manager applying without its entry removes just that entry.
        let object = apply(
            &object,
            &json!({"status": {"nodes": []}}),
            "node/a",
            true,
            sub,
            &maps(),
        )
        .expect("applied");
        assert_eq!(
            object["status"]["nodes"],
            json!([{"nodeName": "b", "state": "Loaded"}])
        );
        let managers: Vec<&str> = object["metadata"]["managedFields"]
            .as_array()
            .expect("applied")
            .iter()
            .map(|e| e["manager"].as_str().expect("applied"))
            .collect();
        assert_eq!(managers, ["node/b"], "a manager owning nothing is dropped");
        assert_eq!(
            object["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:status": {"f:nodes": {"k:{\"nodeName\":\"b\"}": {".": {}, "f:nodeName": {}, "f:state": {}}}}})
        );
        assert_eq!(
            object["metadata"]["managedFields"][0]["subresource"],
            "status"
        );
    }

    #[test]
    fn a_field_dropped_from_an_apply_is_removed() {
        let object = json!({"metadata": {"name": "p"}});
        let with =
            json!({"status": {"nodes": [{"nodeName": "a", "state": "Failed", "message": "bad"}]}});
        let object =
            apply(&object, &with, "node/a", false, Some("status"), &maps()).expect("applied");
        let object = apply(
            &object,
            &entry("a", "Loaded"),
            "node/a",
            false,
            Some("status"),
            &maps(),
        )
        .expect("applied");
        assert_eq!(
            object["status"]["nodes"],
            json!([{"nodeName": "a", "state": "Loaded"}])
        );
    }

    #[test]
    fn a_map_whose_fields_were_all_dropped_goes_too() {
        let current = json!({"metadata": {"name": "p"}, "spec": {"kind": "admission"}});
        let first = apply(
            &current,
            &json!({"spec": {"kind": "admission", "source": {"configMap": {"name": "c", "key": "k"}}}}),
            "kubectl",
            false,
            None,
            &[],
        )
        .expect("first");
        let second = apply(
            &first,
            &json!({"spec": {"kind": "admission", "source": {"oci": {"reference": "r"}}}}),
            "kubectl",
            false,
            None,
            &[],
        )
        .expect("second");
        assert_eq!(second["spec"]["source"], json!({"oci": {"reference": "r"}}));
    }

    #[test]
    fn another_managers_field_conflicts_unless_forced() {
        let object = json!({"metadata": {"name": "p"}});
        let summary = |n: u64| json!({"status": {"summary": {"nodes": n}}});
        let object =
            apply(&object, &summary(1), "one", false, Some("status"), &maps()).expect("applied");
        let err = apply(&object, &summary(2), "two", false, Some("status"), &maps())
            .expect_err("refused");
        assert_eq!(err["code"], 409);
        assert_eq!(
            err["message"],
            "Apply failed with 1 conflict: conflict with \"one\": .status.summary.nodes"
        );
        // The same value is shared, not a conflict.
        apply(&object, &summary(1), "two", false, Some("status"), &maps()).expect("applied");
        let forced =
            apply(&object, &summary(2), "two", true, Some("status"), &maps()).expect("applied");
        assert_eq!(forced["status"]["summary"]["nodes"], 2);
        let managers: Vec<&str> = forced["metadata"]["managedFields"]
            .as_array()
            .expect("applied")
            .iter()
            .map(|e| e["manager"].as_str().expect("applied"))
            .collect();
        assert_eq!(managers, ["two"], "force takes the field over");
        let err = apply(&object, &summary(2), "", true, None, &maps()).expect_err("refused");
        assert_eq!(err["code"], 422);
    }
}
