//! Writing a pod source: return the whole set of pods the source wants, every poll.
//!
//! ```ignore
//! use wasmlet_plugin_sdk::source::*;
//!
//! struct One;
//!
//! impl PodSource for One {
//!     fn poll() -> Result<Snapshot, String> {
//!         let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: app, image: nginx}]}";
//!         Ok(parse_manifests("inline", yaml).into())
//!     }
//! }
//!
//! wasmlet_plugin_sdk::export_pod_source!(One);
//! ```

pub use crate::source_bindings::exports::wasmlet::plugin::source::{
    PodManifest, Problem, Snapshot,
};

/// A pod source.
pub trait PodSource {
    /// The source's whole desired set now. An error means the source could not be read
    /// at all (the host keeps the previous set); a manifest that cannot be read belongs
    /// in [`Snapshot::problems`] instead.
    fn poll() -> Result<Snapshot, String>;
}

/// Where the granted directory is, inside the plugin.
pub const MANIFEST_DIR: &str = "/manifests";

/// Pods and problems read from manifests, gathered into a [`Snapshot`].
#[derive(Debug, Default)]
pub struct Manifests {
    /// Pods read.
    pub pods: Vec<PodManifest>,
    /// Manifests skipped.
    pub problems: Vec<Problem>,
}

impl Manifests {
    /// Adds what another read found.
    pub fn extend(&mut self, other: Manifests) {
        self.pods.extend(other.pods);
        self.problems.extend(other.problems);
    }

    /// Records a manifest that could not be read.
    pub fn problem(&mut self, origin: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            origin: origin.into(),
            message: message.into(),
        });
    }
}

impl From<Manifests> for Snapshot {
    fn from(m: Manifests) -> Self {
        Snapshot {
            pods: m.pods,
            problems: m.problems,
        }
    }
}

/// Reads Kubernetes manifests from `text` (YAML or JSON; several YAML documents; a Pod,
/// or a `PodList` / `List` of pods), naming each pod's origin after `origin`: `origin`
/// for a single document, `origin#2` for the second of several, `origin#1[3]` for the
/// fourth item of a list. Empty documents are skipped; anything that is not a pod is a
/// problem.
#[cfg(feature = "manifests")]
pub fn parse_manifests(origin: &str, text: &str) -> Manifests {
    use serde::Deserialize;
    use serde_json::Value;

    let mut out = Manifests::default();
    // Documents are read one at a time: after a syntax error the rest of the stream
    // cannot be trusted (and the parser would not move past it).
    let mut values = Vec::new();
    let mut broken = None;
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        match Value::deserialize(document) {
            Ok(v) => values.push(v),
            Err(e) => {
                broken = Some(e.to_string());
                break;
            }
        }
    }
    let several = values.len() + usize::from(broken.is_some()) > 1;
    let name = |i: usize| {
        if several {
            format!("{origin}#{}", i + 1)
        } else {
            origin.to_owned()
        }
    };
    if let Some(message) = broken {
        out.problem(name(values.len()), message);
    }
    for (i, value) in values.into_iter().enumerate() {
        let doc_origin = name(i);
        let kind = value.get("kind").and_then(Value::as_str).map(str::to_owned);
        match (kind.as_deref(), &value) {
            (_, Value::Null) => {}
            (Some("Pod"), _) => out.pods.push(PodManifest {
                origin: doc_origin,
                pod_json: value.to_string(),
            }),
            (Some("PodList" | "List"), _) => {
                let Some(items) = value.get("items").and_then(Value::as_array) else {
                    out.problem(doc_origin, "a list without items");
                    continue;
                };
                for (j, item) in items.iter().enumerate() {
                    let item_origin = format!("{doc_origin}[{j}]");
                    match item.get("kind").and_then(Value::as_str) {
                        Some("Pod") | None if item.is_object() => out.pods.push(PodManifest {
                            origin: item_origin,
                            pod_json: item.to_string(),
                        }),
                        Some(other) => out.problem(item_origin, format!("a {other}, not a Pod")),
                        None => out.problem(item_origin, "not an object"),
                    }
                }
            }
            (Some(other), _) => out.problem(doc_origin, format!("a {other}, not a Pod")),
            (None, Value::Object(_)) => out.problem(doc_origin, "no kind: expected kind: Pod"),
            (None, _) => out.problem(doc_origin, "not a Kubernetes object"),
        }
    }
    out
}

#[cfg(all(test, feature = "manifests"))]
mod tests {
    use super::*;

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx\n";

    fn origins(m: &Manifests) -> (Vec<&str>, Vec<String>) {
        (
            m.pods.iter().map(|p| p.origin.as_str()).collect(),
            m.problems
                .iter()
                .map(|p| format!("{}: {}", p.origin, p.message))
                .collect(),
        )
    }

    #[test]
    fn a_single_pod_keeps_its_origin() {
        let m = parse_manifests("web.yaml", POD);
        assert_eq!(origins(&m), (vec!["web.yaml"], vec![]));
        assert!(m.pods[0].pod_json.contains(r#""name":"web""#));
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"}}"#;
        assert_eq!(
            origins(&parse_manifests("j.json", json)),
            (vec!["j.json"], vec![])
        );
    }

    #[test]
    fn documents_and_lists_are_numbered() {
        let text = format!(
            "{POD}---\n---\nkind: Deployment\nmetadata: {{name: d}}\n---\nkind: PodList\nitems:\n- metadata: {{name: a}}\n- kind: Service\n"
        );
        let m = parse_manifests("all.yaml", &text);
        assert_eq!(
            origins(&m),
            (
                vec!["all.yaml#1", "all.yaml#4[0]"],
                vec![
                    "all.yaml#3: a Deployment, not a Pod".to_owned(),
                    "all.yaml#4[1]: a Service, not a Pod".to_owned()
                ]
            )
        );
    }

    #[test]
    fn broken_yaml_is_a_problem_not_a_panic() {
        let m = parse_manifests("bad.yaml", "kind: Pod\nmetadata: [unclosed\n");
        assert!(m.pods.is_empty());
        assert_eq!(m.problems.len(), 1);
        assert_eq!(m.problems[0].origin, "bad.yaml");
        let m = parse_manifests("x.yaml", "just a string");
        assert_eq!(
            origins(&m).1,
            vec!["x.yaml: not a Kubernetes object".to_owned()]
        );
    }
}
