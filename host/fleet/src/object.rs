//! A WasmletPlugin object as a node reads it: [`Desired`], what the object asks of the
//! nodes it selects, or the message that says why it cannot be run (on the node's
//! status entry).
//!
//! The spec is read field by field from the object's JSON, not through a derived type:
//! an object a newer CRD allows (an unknown plugin kind, a new field) is one Failed
//! entry on this node, never a watch that stops for every plugin.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use kube::api::{ApiResource, GroupVersionKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The API group.
pub const GROUP: &str = "wasmlet.dev";
/// The served version.
pub const VERSION: &str = "v1alpha1";
/// The kind.
pub const KIND: &str = "WasmletPlugin";
/// The resource.
pub const PLURAL: &str = "wasmletplugins";

/// The kind of a node's own object.
pub const NODE_KIND: &str = "WasmletNode";
/// Its resource.
pub const NODE_PLURAL: &str = "wasmletnodes";

/// The resource, for `kube::Api<DynamicObject>`.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// The WasmletNode resource, for `kube::Api<DynamicObject>`.
pub fn node_api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, NODE_KIND),
        NODE_PLURAL,
    )
}

/// A WasmletPlugin as a node's watch reads it: the spec as JSON, of the metadata only
/// what the node and the watch use. The status (the controller's counts, nobody's
/// business on a node), the managed fields and the rest of the metadata are skipped
/// unread.
#[derive(Clone, Debug, Deserialize)]
pub struct Watched {
    /// Name, generation, uid and resourceVersion.
    #[serde(deserialize_with = "light_meta")]
    pub metadata: ObjectMeta,
    /// `spec`, as sent.
    #[serde(default)]
    pub spec: Value,
}

/// Of an object's metadata, only its name, generation, resourceVersion and uid.
pub(crate) fn light_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Light {
        name: Option<String>,
        generation: Option<i64>,
        resource_version: Option<String>,
        uid: Option<String>,
    }
    let l = Light::deserialize(d)?;
    Ok(ObjectMeta {
        name: l.name,
        generation: l.generation,
        resource_version: l.resource_version,
        uid: l.uid,
        ..ObjectMeta::default()
    })
}

/// `kube::Resource` for a cluster-scoped type of this group holding its metadata in
/// `metadata`: `cluster_resource!(Type, KIND, PLURAL)`.
macro_rules! cluster_resource {
    ($type:ty, $kind:expr, $plural:expr) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = kube::core::ClusterResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }

            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $crate::object::GROUP.into()
            }

            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $crate::object::VERSION.into()
            }

            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use cluster_resource;

cluster_resource!(Watched, KIND, PLURAL);

/// What a node will not run of a WasmletPlugin's spec: the field, named from the
/// object's root (`spec.source.oci.reference`), and what is wrong with it. Said as the
/// message of the node's Failed entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// The field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl SpecError {
    /// Field `field` is wrong for `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<wasmlet_plugin_host::config::ConfigError> for SpecError {
    fn from(e: wasmlet_plugin_host::config::ConfigError) -> Self {
        Self::new(e.field, e.message)
    }
}

/// The kinds of plugin a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// An admission policy (the kubelet's canAdmitPod), in the admission chain.
    #[serde(rename = "admission")]
    Admission,
    /// A probe handler.
    #[serde(rename = "probe-handler")]
    ProbeHandler,
    /// A pod source.
    #[serde(rename = "pod-source")]
    PodSource,
}

impl Kind {
    fn parse(text: &str) -> Option<Kind> {
        match text {
            "admission" => Some(Kind::Admission),
            "probe-handler" => Some(Kind::ProbeHandler),
            "pod-source" => Some(Kind::PodSource),
            _ => None,
        }
    }
}

/// Where the component comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// An OCI artifact (`REGISTRY/REPOSITORY[:TAG|@DIGEST]`).
    Oci {
        /// The reference, without `oci://`.
        reference: String,
        /// A `kubernetes.io/dockerconfigjson` Secret in the plugin namespace.
        pull_secret: Option<String>,
        /// Plain HTTP.
        insecure: bool,
    },
    /// A ConfigMap's `binaryData` key, in the plugin namespace.
    ConfigMap {
        /// The ConfigMap.
        name: String,
        /// The key.
        key: String,
    },
}

/// A label selector (`matchLabels`, `matchExpressions`), as a DaemonSet's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    /// Labels that must be there with these values.
    pub match_labels: BTreeMap<String, String>,
    /// (key, operator, values).
    pub match_expressions: Vec<(String, String, Vec<String>)>,
}

impl Selector {
    /// Whether a node with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|(key, op, values)| {
                let have = labels.get(key);
                match op.as_str() {
                    "In" => have.is_some_and(|v| values.contains(v)),
                    "NotIn" => have.is_none_or(|v| !values.contains(v)),
                    "Exists" => have.is_some(),
                    "DoesNotExist" => have.is_none(),
                    _ => false,
                }
            })
    }
}

/// What an object asks of a node, as read from its spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Desired {
    /// The object's name: the plugin's name in the chain, logs and metrics.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// The plugin kind.
    pub kind: Kind,
    /// The component's sha256, hex.
    pub sha256: String,
    /// Where it comes from.
    pub source: Source,
    /// The nodes that run it.
    pub selector: Selector,
    /// The rest of the spec (settings of the kind, capabilities, config), as written.
    pub spec: Value,
}

/// The selector alone, for deciding whether a node takes part before the rest is read
/// (a node not selected says nothing about an object it would refuse).
pub fn selector(object: &Value) -> Result<Selector, SpecError> {
    let s = &object["spec"]["nodeSelector"];
    if s.is_null() {
        return Ok(Selector::default());
    }
    let mut out = Selector::default();
    if let Some(labels) = s["matchLabels"].as_object() {
        for (k, v) in labels {
            let v = v.as_str().ok_or_else(|| {
                SpecError::new(format!("spec.nodeSelector.matchLabels.{k}"), "not a string")
            })?;
            out.match_labels.insert(k.clone(), v.to_owned());
        }
    }
    for (i, e) in s["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let field = |f: &str| format!("spec.nodeSelector.matchExpressions[{i}].{f}");
        let key = e["key"]
            .as_str()
            .ok_or_else(|| SpecError::new(field("key"), "required"))?;
        let op = e["operator"].as_str().unwrap_or_default();
        let values: Vec<String> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        match op {
            "In" | "NotIn" if values.is_empty() => {
                return Err(SpecError::new(
                    field("values"),
                    format!("required for operator {op}"),
                ));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Err(SpecError::new(
                    field("operator"),
                    format!("unknown operator {other:?} (In, NotIn, Exists, DoesNotExist)"),
                ));
            }
        }
        out.match_expressions
            .push((key.to_owned(), op.to_owned(), values));
    }
    Ok(out)
}

/// Reads what `object` asks of the nodes it selects; the error names the field.
pub fn desired(object: &Value) -> Result<Desired, SpecError> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let spec = &object["spec"];
    let kind_text = spec["kind"].as_str().unwrap_or_default();
    let kind = Kind::parse(kind_text).ok_or_else(|| {
        SpecError::new(
            "spec.kind",
            format!(
                "unknown plugin kind {kind_text:?} (this node runs admission, probe-handler and pod-source plugins)"
            ),
        )
    })?;
    let digest = spec["digest"].as_str().unwrap_or_default();
    let sha256 = digest
        .strip_prefix("sha256:")
        .filter(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .ok_or_else(|| {
            SpecError::new(
                "spec.digest",
                format!("{digest:?} is not sha256:<64 lowercase hex digits>"),
            )
        })?
        .to_owned();
    let source = match (&spec["source"]["oci"], &spec["source"]["configMap"]) {
        (oci, Value::Null) if oci.is_object() => {
            let reference = oci["reference"].as_str().unwrap_or_default();
            let reference = reference.strip_prefix("oci://").unwrap_or(reference);
            if reference.is_empty() {
                return Err(SpecError::new("spec.source.oci.reference", "required"));
            }
            Source::Oci {
                reference: reference.to_owned(),
                pull_secret: oci["pullSecret"].as_str().map(str::to_owned),
                insecure: oci["insecure"].as_bool().unwrap_or(false),
            }
        }
        (Value::Null, cm) if cm.is_object() => {
            let field = |f: &str| {
                cm[f]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| SpecError::new(format!("spec.source.configMap.{f}"), "required"))
            };
            Source::ConfigMap {
                name: field("name")?,
                key: field("key")?,
            }
        }
        (Value::Null, Value::Null) => {
            return Err(SpecError::new("spec.source", "required (oci or configMap)"));
        }
        _ => {
            return Err(SpecError::new(
                "spec.source",
                "give one of oci, configMap, not both",
            ));
        }
    };
    Ok(Desired {
        name,
        generation: object["metadata"]["generation"].as_i64().unwrap_or(0),
        kind,
        sha256,
        source,
        selector: selector(object)?,
        spec: spec.clone(),
    })
}

impl Desired {
    /// Whether `other` asks for the same plugin (only the generation may differ).
    pub fn same_plugin(&self, other: &Desired) -> bool {
        self.kind == other.kind && self.sha256 == other.sha256 && self.spec == other.spec
    }

    /// The configuration values (`spec.config`).
    pub fn config(&self) -> Result<BTreeMap<String, String>, SpecError> {
        let mut out = BTreeMap::new();
        for (k, v) in self.spec["config"].as_object().into_iter().flatten() {
            let v = v
                .as_str()
                .ok_or_else(|| SpecError::new(format!("spec.config.{k}"), "not a string"))?;
            out.insert(k.clone(), v.to_owned());
        }
        Ok(out)
    }

    /// `spec.<path>` as a string, if there.
    pub fn text(&self, path: &[&str]) -> Option<String> {
        path.iter()
            .try_fold(&self.spec, |v, p| v.get(p))
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn object(spec: Value) -> Value {
        json!({"metadata": {"name": "deny-privileged", "generation": 3}, "spec": spec})
    }

    #[test]
    fn an_object_is_read_with_its_source_and_selector() {
        let d = desired(&object(json!({
            "kind": "admission", "digest": DIGEST,
            "source": {"oci": {"reference": "oci://127.0.0.1:5000/policies/deny:1", "pullSecret": "reg"}},
            "nodeSelector": {"matchLabels": {"canary": "true"},
                             "matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]},
            "admission": {"failurePolicy": "Ignore"},
        })))
        .expect("desired");
        assert_eq!(d.name, "deny-privileged");
        assert_eq!(d.generation, 3);
        assert_eq!(d.kind, Kind::Admission);
        assert_eq!(d.sha256, DIGEST.trim_start_matches("sha256:"));
        assert_eq!(
            d.source,
            Source::Oci {
                reference: "127.0.0.1:5000/policies/deny:1".into(),
                pull_secret: Some("reg".into()),
                insecure: false
            }
        );
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()
        };
        assert!(d.selector.matches(&labels(&[("canary", "true")])));
        assert!(
            d.selector
                .matches(&labels(&[("canary", "true"), ("zone", "a")]))
        );
        assert!(
            !d.selector
                .matches(&labels(&[("canary", "true"), ("zone", "b")]))
        );
        assert!(!d.selector.matches(&labels(&[])));
        assert!(
            Selector::default().matches(&labels(&[])),
            "no selector: every node"
        );
    }

    #[test]
    fn what_a_node_cannot_run_is_named() {
        let cm = json!({"configMap": {"name": "p", "key": "p.wasm"}});
        let cases = [
            (
                json!({"kind": "scheduler", "digest": DIGEST, "source": cm}),
                "spec.kind: unknown plugin kind \"scheduler\" (this node runs admission, probe-handler and pod-source plugins)",
            ),
            (
                json!({"kind": "admission", "digest": "sha256:abc", "source": cm}),
                "spec.digest: \"sha256:abc\" is not sha256:<64 lowercase hex digits>",
            ),
            (
                json!({"kind": "admission", "digest": DIGEST}),
                "spec.source: required (oci or configMap)",
            ),
            (
                json!({"kind": "admission", "digest": DIGEST, "source": {"configMap": {"name": "p"}}}),
                "spec.source.configMap.key: required",
            ),
            (
                json!({"kind": "admission", "digest": DIGEST, "source": cm,
                    "nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
                "spec.nodeSelector.matchExpressions[0].operator: unknown operator \"Near\" (In, NotIn, Exists, DoesNotExist)",
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(
                desired(&object(spec)).expect_err("refused").to_string(),
                want
            );
        }
    }
}
