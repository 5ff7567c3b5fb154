//! Custom resources, as apiextensions serves them: a CustomResourceDefinition created in
//! the double makes its resource servable under `apis/<group>/<version>` (until then
//! those paths are 404, as for any group the API server does not have), with the
//! `status` subresource when the definition asks for it, `metadata.generation` counting
//! changes to everything but metadata and status, and the schema's
//! `x-kubernetes-list-type: map` lists merged by their keys in server-side apply.
//! Deleting the definition deletes its objects.

use serde_json::{Value, json};

use crate::values::status;

/// The prefix CustomResourceDefinitions live under.
pub(crate) const PREFIX: &str = "apis/apiextensions.k8s.io/v1";
/// Their resource.
pub(crate) const RESOURCE: &str = "customresourcedefinitions";

/// A served resource: (prefix, plural).
pub(crate) type Served = (String, String);

/// What the double knows of one served version of a custom resource.
#[derive(Debug, Clone)]
pub(crate) struct Crd {
    /// The definition's name (`<plural>.<group>`).
    pub(crate) definition: String,
    /// `spec.names.kind`.
    pub(crate) kind: String,
    /// Whether it has the `status` subresource.
    pub(crate) status: bool,
    /// Lists merged by key in apply: (path of field names from the root, key fields).
    pub(crate) list_maps: Vec<(Vec<String>, Vec<String>)>,
}

/// Whether `prefix` (`api/v1`, `apis/apps/v1`) belongs to a group the API server has
/// built in: the core group, dotless groups (`apps`, `batch`) and `*.k8s.io`. Any other
/// group exists only through a CustomResourceDefinition.
pub(crate) fn built_in(prefix: &str) -> bool {
    match prefix.strip_prefix("apis/") {
        None => true,
        Some(gv) => {
            let group = gv.split('/').next().unwrap_or_default();
            !group.contains('.') || group.ends_with(".k8s.io")
        }
    }
}

/// The served versions of definition `object`, each as (prefix, plural) and what to know
/// of it, or the API server's 422 for a definition it would not accept.
pub(crate) fn versions(object: &Value) -> Result<Vec<(Served, Crd)>, Value> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let spec = &object["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    let kind = spec["names"]["kind"].as_str().unwrap_or_default();
    let invalid = |field: &str, message: String| {
        status(
            422,
            "Invalid",
            format!(
                "CustomResourceDefinition.apiextensions.k8s.io \"{name}\" is invalid: {field}: {message}"
            ),
        )
    };
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Err(invalid(
            "spec",
            "Required value: group, names.plural and names.kind are required".into(),
        ));
    }
    if name != format!("{plural}.{group}") {
        return Err(invalid(
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let mut out = Vec::new();
    for version in spec["versions"].as_array().into_iter().flatten() {
        if version["served"] == false {
            continue;
        }
        let v = version["name"].as_str().unwrap_or_default();
        let mut list_maps = Vec::new();
        list_maps_in(
            &version["schema"]["openAPIV3Schema"],
            &mut Vec::new(),
            &mut list_maps,
        );
        out.push((
            (format!("apis/{group}/{v}"), plural.to_owned()),
            Crd {
                definition: name.to_owned(),
                kind: kind.to_owned(),
                status: version["subresources"]["status"].is_object(),
                list_maps,
            },
        ));
    }
    if out.is_empty() {
        return Err(invalid(
            "spec.versions",
            "Invalid value: must have exactly one version marked as storage version".into(),
        ));
    }
    Ok(out)
}

/// Every `x-kubernetes-list-type: map` in `schema`, by its path of field names.
fn list_maps_in(schema: &Value, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Vec<String>)>) {
    if schema["x-kubernetes-list-type"] == "map" {
        let keys = schema["x-kubernetes-list-map-keys"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect();
        out.push((path.clone(), keys));
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (field, sub) in properties {
            path.push(field.clone());
            list_maps_in(sub, path, out);
            path.pop();
        }
    }
    if schema["items"].is_object() {
        list_maps_in(&schema["items"], path, out);
    }
}

/// A definition as stored: accepted and established at once.
pub(crate) fn established(mut object: Value) -> Value {
    let now = crate::values::now_rfc3339();
    object["status"] = json!({
        "acceptedNames": object["spec"]["names"].clone(),
        "storedVersions": object["spec"]["versions"].as_array().into_iter().flatten()
            .filter(|v| v["storage"] == true).map(|v| v["name"].clone()).collect::<Vec<_>>(),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    });
    object
}

/// The part of an object `metadata.generation` counts: everything but metadata and
/// status.
pub(crate) fn generation_changed(old: &Value, new: &Value) -> bool {
    let body = |v: &Value| {
        v.as_object().map(|o| {
            o.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<serde_json::Map<_, _>>()
        })
    };
    body(old) != body(new)
}
