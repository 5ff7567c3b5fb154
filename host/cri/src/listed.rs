//! Lean list answers: what a relist needs of each container and sandbox (id, state,
//! creation time, labels) and nothing else.
//!
//! A relist runs every second over every object on the node. Decoded in full, each
//! listed object is two dozen small strings (metadata, image, labels, annotations);
//! decoding, walking and freeing them is almost all a relist costs. These messages read
//! the same bytes (`ListContainersResponse` / `ListPodSandboxResponse` on the wire)
//! into views that skip metadata, image and annotations, and whose strings are slices
//! of the received buffer rather than copies. Whoever needs the rest asks
//! `ContainerStatus` / `PodSandboxStatus` for the objects that changed.
//!
//! Field numbers are the CRI's (`runtime.v1`, api.proto).

use prost::bytes::Bytes;

use crate::proto;

/// One label, as a pair of slices of the answer.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Label {
    /// The key (map entry field 1).
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    /// The value (map entry field 2).
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

/// A container as a relist sees it (`runtime.v1.Container`, fields 1, 2, 6, 7, 8).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ListedContainer {
    /// The container's id.
    #[prost(bytes = "bytes", tag = "1")]
    pub id: Bytes,
    /// Its sandbox's id.
    #[prost(bytes = "bytes", tag = "2")]
    pub pod_sandbox_id: Bytes,
    /// `ContainerState` as a number.
    #[prost(int32, tag = "6")]
    pub state: i32,
    /// Creation time, ns since the epoch.
    #[prost(int64, tag = "7")]
    pub created_at: i64,
    /// Its labels.
    #[prost(message, repeated, tag = "8")]
    pub labels: Vec<Label>,
}

/// A sandbox as a relist sees it (`runtime.v1.PodSandbox`, fields 1, 3, 4, 5).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ListedSandbox {
    /// The sandbox's id.
    #[prost(bytes = "bytes", tag = "1")]
    pub id: Bytes,
    /// `PodSandboxState` as a number.
    #[prost(int32, tag = "3")]
    pub state: i32,
    /// Creation time, ns since the epoch.
    #[prost(int64, tag = "4")]
    pub created_at: i64,
    /// Its labels.
    #[prost(message, repeated, tag = "5")]
    pub labels: Vec<Label>,
}

/// `ListContainersResponse`, read leanly.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListedContainers {
    /// Field 1: the containers.
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<ListedContainer>,
}

/// `ListPodSandboxResponse`, read leanly.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListedSandboxes {
    /// Field 1: the sandboxes.
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<ListedSandbox>,
}

/// The value of label `key`, when present and UTF-8.
pub fn label<'a>(labels: &'a [Label], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|l| l.key.as_ref() == key.as_bytes())
        .and_then(|l| std::str::from_utf8(&l.value).ok())
}

/// A slice of the answer as text (ids are ASCII; anything else reads as empty).
pub fn text(bytes: &Bytes) -> &str {
    std::str::from_utf8(bytes).unwrap_or_default()
}

fn labels_of(map: &std::collections::BTreeMap<String, String>) -> Vec<Label> {
    map.iter()
        .map(|(k, v)| Label {
            key: Bytes::copy_from_slice(k.as_bytes()),
            value: Bytes::copy_from_slice(v.as_bytes()),
        })
        .collect()
}

impl From<&proto::Container> for ListedContainer {
    fn from(c: &proto::Container) -> Self {
        ListedContainer {
            id: Bytes::copy_from_slice(c.id.as_bytes()),
            pod_sandbox_id: Bytes::copy_from_slice(c.pod_sandbox_id.as_bytes()),
            state: c.state,
            created_at: c.created_at,
            labels: labels_of(&c.labels),
        }
    }
}

impl From<&proto::PodSandbox> for ListedSandbox {
    fn from(s: &proto::PodSandbox) -> Self {
        ListedSandbox {
            id: Bytes::copy_from_slice(s.id.as_bytes()),
            state: s.state,
            created_at: s.created_at,
            labels: labels_of(&s.labels),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn full_answers_read_leanly() {
        let full = proto::ListContainersResponse {
            containers: vec![proto::Container {
                id: "c1".into(),
                pod_sandbox_id: "s1".into(),
                metadata: Some(proto::ContainerMetadata {
                    name: "web".into(),
                    attempt: 2,
                }),
                image: Some(proto::ImageSpec {
                    image: "busybox".into(),
                    ..Default::default()
                }),
                image_ref: "sha256:abc".into(),
                state: proto::ContainerState::ContainerRunning as i32,
                created_at: 42,
                labels: [("a".to_string(), "1".to_string()), ("b".into(), "2".into())].into(),
                annotations: [("x".to_string(), "y".to_string())].into(),
                image_id: "id".into(),
            }],
        };
        let lean = ListedContainers::decode(Bytes::from(full.encode_to_vec())).expect("decode");
        let c = &lean.containers[0];
        assert_eq!(text(&c.id), "c1");
        assert_eq!(text(&c.pod_sandbox_id), "s1");
        assert_eq!(c.state, proto::ContainerState::ContainerRunning as i32);
        assert_eq!(c.created_at, 42);
        assert_eq!(label(&c.labels, "b"), Some("2"));
        assert_eq!(label(&c.labels, "x"), None, "annotations are not labels");
        assert_eq!(*c, ListedContainer::from(&full.containers[0]));

        let full = proto::ListPodSandboxResponse {
            items: vec![proto::PodSandbox {
                id: "s1".into(),
                state: proto::PodSandboxState::SandboxReady as i32,
                created_at: 7,
                labels: [("k".to_string(), "v".to_string())].into(),
                annotations: [("k".to_string(), "other".to_string())].into(),
                runtime_handler: "runc".into(),
                ..Default::default()
            }],
        };
        let lean = ListedSandboxes::decode(Bytes::from(full.encode_to_vec())).expect("decode");
        assert_eq!(lean.items[0], ListedSandbox::from(&full.items[0]));
        assert_eq!(label(&lean.items[0].labels, "k"), Some("v"));
    }
}
