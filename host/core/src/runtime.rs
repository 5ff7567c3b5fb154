//! What the runtime has for a pod ([`PodRuntime`]): its sandboxes and containers, read
//! back through the labels and annotations the agent put on them when it created them.
//! Those labels are what lets a restarted agent adopt running pods: everything it needs
//! to know about a container (pod, name, spec hash, restart count) is on the container.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use sha2::{Digest, Sha256};
use wasmlet_cri_api::proto;

/// Label: the pod's UID (sandboxes and containers).
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// Label: the pod's name.
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
/// Label: the pod's namespace.
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// Label: the container's name in the pod spec.
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";
/// Label: the node (agent) that owns the object; an agent touches nothing else.
pub const NODE_LABEL: &str = "wasmlet.io/node";
/// Annotation: the hash of the container's spec.
pub const CONTAINER_HASH_ANNOTATION: &str = "io.kubernetes.container.hash";
/// Annotation: how many times the container was restarted before this instance.
pub const RESTART_COUNT_ANNOTATION: &str = "io.kubernetes.container.restartCount";
/// Annotation: the container's `terminationMessagePolicy` (`File`,
/// `FallbackToLogsOnError`).
pub const TERMINATION_MESSAGE_POLICY_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePolicy";
/// Annotation: the pod's grace period.
pub const GRACE_ANNOTATION: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Annotation: where the container's termination message is written.
pub const TERMINATION_MESSAGE_PATH_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePath";
/// Annotation: `init` for init containers.
pub const CONTAINER_TYPE_ANNOTATION: &str = "wasmlet.io/container-type";

/// A container's state as the runtime reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum State {
    /// Created, not started.
    Created,
    /// Running.
    Running,
    /// Exited.
    Exited,
    /// The runtime does not know.
    #[default]
    Unknown,
}

impl State {
    /// From the CRI enum value.
    pub fn from_cri(state: i32) -> Self {
        match proto::ContainerState::try_from(state) {
            Ok(proto::ContainerState::ContainerCreated) => State::Created,
            Ok(proto::ContainerState::ContainerRunning) => State::Running,
            Ok(proto::ContainerState::ContainerExited) => State::Exited,
            _ => State::Unknown,
        }
    }
}

/// One sandbox of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sandbox {
    /// The runtime's id.
    pub id: String,
    /// How many sandboxes the pod had before this one.
    pub attempt: u32,
    /// Whether it is ready.
    pub ready: bool,
    /// Unix nanoseconds.
    pub created_at: i64,
    /// Its IP addresses (empty with the node's network, or before networking is up).
    pub ips: Vec<String>,
    /// Whether it uses the node's network namespace.
    pub host_network: bool,
}

/// One container of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerInfo {
    /// The runtime's id.
    pub id: String,
    /// Its sandbox.
    pub sandbox_id: String,
    /// The name in the pod spec.
    pub name: String,
    /// The runtime's state.
    pub state: State,
    /// Unix nanoseconds (0 when unknown).
    pub created_at: i64,
    /// Unix nanoseconds (0 when it has not started).
    pub started_at: i64,
    /// Unix nanoseconds (0 while it runs).
    pub finished_at: i64,
    /// Exit code, once exited.
    pub exit_code: i32,
    /// The runtime's reason (`Completed`, `Error`, `OOMKilled`).
    pub reason: String,
    /// The runtime's message (or the termination message).
    pub message: String,
    /// The image: in a listing, the name it was created with; from ContainerStatus,
    /// the runtime's name for it (containerd: the image's first tag) — what the
    /// kubelet reports as the container status's `image`.
    pub image: String,
    /// The image the runtime ran (its id or digest).
    pub image_ref: String,
    /// The spec hash it was created from.
    pub hash: String,
    /// Restarts before this instance.
    pub restart_count: i32,
    /// Whether it is an init container.
    pub init: bool,
    /// Whether the details (times, exit code) come from ContainerStatus, not just a list.
    pub detailed: bool,
}

/// Everything the runtime has for one pod, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRuntime {
    /// The pod's UID.
    pub uid: String,
    /// Its name and namespace, from the labels (for pods the agent no longer knows).
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Sandboxes, newest first.
    pub sandboxes: Vec<Sandbox>,
    /// Containers, newest first.
    pub containers: Vec<ContainerInfo>,
}

impl PodRuntime {
    /// The newest instance of the container called `name`.
    pub fn latest(&self, name: &str) -> Option<&ContainerInfo> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The newest instance of `name` that has exited (the one a restart's back-off
    /// counts from).
    pub fn latest_exited(&self, name: &str) -> Option<&ContainerInfo> {
        self.containers
            .iter()
            .find(|c| c.name == name && c.state == State::Exited)
    }

    /// The instance before the newest one of `name` (the status's lastState).
    pub fn previous(&self, name: &str) -> Option<&ContainerInfo> {
        self.containers.iter().filter(|c| c.name == name).nth(1)
    }

    /// The newest sandbox.
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandboxes.first()
    }

    /// Running containers.
    pub fn running(&self) -> impl Iterator<Item = &ContainerInfo> {
        self.containers.iter().filter(|c| c.state == State::Running)
    }

    /// Sorts sandboxes and containers newest first (ties broken by id, for stable output).
    pub fn sort(&mut self) {
        self.sandboxes
            .sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        self.containers
            .sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
    }
}

/// The hash of a container's spec, written on the container when it is created: the
/// kubelet's (so that either agent recognises the other's containers), or wasmlet's own
/// for a spec that computation does not cover.
pub fn container_hash(c: &k8s::Container) -> String {
    crate::pod::kubelet::container_hash(c).unwrap_or_else(|| own_hash(c))
}

/// Whether a container created with `hash` still runs spec `c`: the kubelet 1.33's
/// hash, the kubelet 1.28's (containers made before an upgrade are not restarted for
/// it), or wasmlet's own (which earlier versions wrote on every container). One that
/// does not is killed and recreated.
pub fn hash_matches(hash: &str, c: &k8s::Container) -> bool {
    use crate::pod::kubelet::{container_hash, container_hash_128};
    container_hash(c).is_some_and(|k| k == hash)
        || container_hash_128(c).is_some_and(|k| k == hash)
        || hash == own_hash(c)
}

/// wasmlet's own hash of a container's spec.
fn own_hash(c: &k8s::Container) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(c).unwrap_or_default());
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A sandbox as ListPodSandbox reports it, without the IPs (those come from
/// PodSandboxStatus).
pub fn sandbox_from_list(s: &proto::PodSandbox) -> Sandbox {
    let host_network = s
        .annotations
        .get(HOST_NETWORK_ANNOTATION)
        .is_some_and(|v| v == "true");
    Sandbox {
        id: s.id.clone(),
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        ready: s.state == proto::PodSandboxState::SandboxReady as i32,
        created_at: s.created_at,
        ips: Vec::new(),
        host_network,
    }
}

/// Annotation on sandboxes: `true` when it uses the node's network.
pub const HOST_NETWORK_ANNOTATION: &str = "wasmlet.io/host-network";

fn parse_annotation<T: std::str::FromStr + Default>(
    annotations: &BTreeMap<String, String>,
    key: &str,
) -> T {
    annotations
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

/// A container as ListContainers reports it (no times but creation, no exit code).
pub fn container_from_list(c: &proto::Container) -> ContainerInfo {
    ContainerInfo {
        id: c.id.clone(),
        sandbox_id: c.pod_sandbox_id.clone(),
        name: c
            .labels
            .get(CONTAINER_NAME_LABEL)
            .cloned()
            .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
            .unwrap_or_default(),
        state: State::from_cri(c.state),
        created_at: c.created_at,
        started_at: 0,
        finished_at: 0,
        exit_code: 0,
        reason: String::new(),
        message: String::new(),
        image: c
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default(),
        image_ref: c.image_ref.clone(),
        hash: c
            .annotations
            .get(CONTAINER_HASH_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
        restart_count: parse_annotation(&c.annotations, RESTART_COUNT_ANNOTATION),
        init: c
            .annotations
            .get(CONTAINER_TYPE_ANNOTATION)
            .is_some_and(|t| t == "init"),
        detailed: false,
    }
}

/// A container as ContainerStatus reports it, in `sandbox_id` (which the status does
/// not name), with the termination message the container wrote (see [`add_status`]).
pub fn container_from_status(
    s: &proto::ContainerStatus,
    sandbox_id: &str,
    written: &str,
) -> ContainerInfo {
    let listed = proto::Container {
        id: s.id.clone(),
        pod_sandbox_id: sandbox_id.to_owned(),
        metadata: s.metadata.clone(),
        image: s.image.clone(),
        image_ref: s.image_ref.clone(),
        state: s.state,
        created_at: s.created_at,
        labels: s.labels.clone(),
        annotations: s.annotations.clone(),
        image_id: s.image_id.clone(),
    };
    let mut info = container_from_list(&listed);
    add_status(&mut info, s, written);
    info
}

/// A sandbox as PodSandboxStatus reports it, IPs included.
pub fn sandbox_from_status(s: &proto::PodSandboxStatus) -> Sandbox {
    let listed = proto::PodSandbox {
        id: s.id.clone(),
        metadata: s.metadata.clone(),
        state: s.state,
        created_at: s.created_at,
        labels: s.labels.clone(),
        annotations: s.annotations.clone(),
        runtime_handler: s.runtime_handler.clone(),
    };
    let mut sandbox = sandbox_from_list(&listed);
    if !s.annotations.contains_key(HOST_NETWORK_ANNOTATION) {
        // Made by the kubelet (adopted): its namespace options say.
        let options = s
            .linux
            .as_ref()
            .and_then(|l| l.namespaces.as_ref())
            .and_then(|n| n.options.as_ref());
        sandbox.host_network =
            options.is_some_and(|o| o.network == proto::NamespaceMode::Node as i32);
    }
    if let Some(net) = &s.network {
        sandbox.ips = std::iter::once(net.ip.clone())
            .chain(net.additional_ips.iter().map(|i| i.ip.clone()))
            .filter(|ip| !ip.is_empty())
            .collect();
    }
    sandbox
}

/// Fills in what ContainerStatus adds to a listed container. `written` is the
/// termination message of an exited container (from its file or log, which the agent
/// reads): it follows the runtime's message.
pub fn add_status(info: &mut ContainerInfo, s: &proto::ContainerStatus, written: &str) {
    info.state = State::from_cri(s.state);
    info.started_at = s.started_at;
    info.finished_at = s.finished_at;
    info.exit_code = s.exit_code;
    info.reason = s.reason.clone();
    info.message = s.message.clone();
    if info.state == State::Exited && !written.is_empty() {
        if !info.message.is_empty() {
            info.message.push_str(": ");
        }
        info.message.push_str(written);
    }
    if !s.image_ref.is_empty() {
        info.image_ref = s.image_ref.clone();
    }
    if let Some(image) = s.image.as_ref().filter(|i| !i.image.is_empty()) {
        info.image.clone_from(&image.image);
    }
    info.detailed = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str, created: i64, state: State) -> ContainerInfo {
        ContainerInfo {
            id: format!("{name}-{created}"),
            sandbox_id: "s".into(),
            name: name.into(),
            state,
            created_at: created,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
            hash: String::new(),
            restart_count: 0,
            init: false,
            detailed: false,
        }
    }

    #[test]
    fn latest_and_previous_follow_creation_time() {
        let mut p = PodRuntime {
            containers: vec![
                container("a", 1, State::Exited),
                container("a", 3, State::Running),
                container("b", 2, State::Running),
                container("a", 2, State::Exited),
            ],
            ..Default::default()
        };
        p.sort();
        assert_eq!(p.latest("a").map(|c| c.id.as_str()), Some("a-3"));
        assert_eq!(p.previous("a").map(|c| c.id.as_str()), Some("a-2"));
        assert_eq!(p.previous("b"), None);
        assert_eq!(p.running().count(), 2);
    }

    #[test]
    fn hashes_change_with_the_spec() {
        let mut c = k8s::Container {
            name: "a".into(),
            image: Some("i:1".into()),
            ..Default::default()
        };
        let h1 = container_hash(&c);
        assert_eq!(h1, container_hash(&c));
        assert!(
            u32::from_str_radix(&h1, 16).is_ok(),
            "the kubelet's: 32-bit hex"
        );
        // Containers made by earlier versions carry wasmlet's own hash: still theirs.
        assert!(hash_matches(&own_hash(&c), &c));
        assert_eq!(own_hash(&c).len(), 16);
        c.image = Some("i:2".into());
        assert_ne!(h1, container_hash(&c));
        assert!(!hash_matches(&h1, &c));
    }
}
