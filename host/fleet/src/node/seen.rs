//! The objects as a node keeps them, and what a watch event asks it to look at again.

use serde_json::Value;

use crate::object;

/// What a watch event asks the node to look at again.
pub(super) enum Changed {
    Nothing,
    All,
    /// One object's spec (or the object itself).
    One(String),
}

/// An object as the controller keeps it.
#[derive(Debug)]
pub(super) struct Seen {
    /// Of the metadata its name and generation; its spec.
    pub(super) object: Value,
}

impl Seen {
    /// The object and its name.
    pub(super) fn from(watched: object::Watched) -> (String, Seen) {
        let name = watched.metadata.name.unwrap_or_default();
        let mut metadata = serde_json::Map::new();
        metadata.insert("name".into(), Value::String(name.clone()));
        metadata.insert("generation".into(), watched.metadata.generation.into());
        let mut object = serde_json::Map::new();
        object.insert("metadata".into(), Value::Object(metadata));
        object.insert("spec".into(), watched.spec);
        let seen = Seen {
            object: Value::Object(object),
        };
        (name, seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(generation: i64, spec: Value, status: Value) -> object::Watched {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "wasmlet.dev/v1alpha1",
            "kind": "WasmletPlugin",
            "metadata": {
                "name": "policy", "generation": generation, "resourceVersion": "7",
                "uid": "u1", "labels": {"team": "a"},
                "managedFields": [{"manager": "wasmlet-node/n1", "operation": "Apply",
                                   "fieldsV1": {"f:status": {}}}],
            },
            "spec": spec,
            "status": status,
        }))
        .expect("a WasmletPlugin")
    }

    #[test]
    fn an_object_is_kept_without_its_managed_fields_and_its_status() {
        let spec = serde_json::json!({"kind": "admission", "digest": "sha256:ab"});
        let status = serde_json::json!({"observedGeneration": 1, "selected": 2, "serving": 1});
        let w = watched(1, spec.clone(), status);
        assert_eq!(w.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(w.metadata.uid.as_deref(), Some("u1"));
        assert!(w.metadata.managed_fields.is_none());
        let (name, seen) = Seen::from(w);
        assert_eq!(name, "policy");
        assert_eq!(
            seen.object,
            serde_json::json!({"metadata": {"name": "policy", "generation": 1}, "spec": spec})
        );

        // The controller's counts change nothing the node compares; a new generation does.
        let (_, later) = Seen::from(watched(1, spec.clone(), serde_json::json!({"serving": 2})));
        assert_eq!(later.object, seen.object);
        let (_, next) = Seen::from(watched(2, spec, Value::Null));
        assert_ne!(next.object, seen.object);
    }
}
