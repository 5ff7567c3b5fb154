//! Pods as the agent holds them: the kubelet's defaults filled in, static pods named and
//! given a UID derived from their content, and the checks a pod must pass before the
//! agent accepts it.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1 as k8s;
use sha2::{Digest, Sha256};

pub mod kubelet;
mod validate;

pub use validate::{InvalidPod, validate};

/// Annotation: the source a pod came from (`file`, `http`, `api`).
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation: the hash a static pod's UID was derived from.
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Annotation: where in its source the pod was defined (file name, `file#2`, URL).
pub const CONFIG_ORIGIN_ANNOTATION: &str = "wasmlet.io/config.origin";
/// Annotation: when the agent first saw the pod (RFC 3339).
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Annotation a mirror pod carries: the config hash of the static pod it mirrors.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The source of pods bound to the node through the API server.
pub const API_SOURCE: &str = "api";
/// Annotation prefix selecting a custom probe: `probe.wasmlet.io/<container>.<probe>`
/// (`<probe>` is `livenessProbe`, `readinessProbe` or `startupProbe`) set to
/// `<kind> [key=value …]` makes that probe a check of the custom kind `<kind>`, by the
/// probe handler configured for it, with those arguments. The probe keeps its timings
/// and thresholds; it needs no handler of its own (one it has is replaced).
pub const CUSTOM_PROBE_PREFIX: &str = "probe.wasmlet.io/";

/// A custom probe a pod asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomProbe {
    /// The custom kind (the handler configured with it in `plugins.probes[].kinds`).
    pub kind: String,
    /// Its arguments.
    pub args: Vec<(String, String)>,
}

/// The custom probe `pod` asks for on `container`'s `probe` (`livenessProbe`, …), if
/// any; an annotation that does not parse is an error saying why.
pub fn custom_probe(
    pod: &k8s::Pod,
    container: &str,
    probe: &str,
) -> Option<Result<CustomProbe, String>> {
    let key = format!("{CUSTOM_PROBE_PREFIX}{container}.{probe}");
    let text = pod.metadata.annotations.as_ref()?.get(&key)?;
    let mut words = text.split_whitespace();
    let Some(kind) = words.next() else {
        return Some(Err("must name a probe kind: `<kind> [key=value …]`".into()));
    };
    let mut args = Vec::new();
    for w in words {
        match w.split_once('=') {
            Some((k, v)) if !k.is_empty() => args.push((k.to_owned(), v.to_owned())),
            _ => return Some(Err(format!("{w:?} is not key=value"))),
        }
    }
    Some(Ok(CustomProbe {
        kind: kind.to_owned(),
        args,
    }))
}

/// The kubelet's default `terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// A pod's identity in logs, the kubelet's way: `name_namespace(uid)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    /// The pod's UID.
    pub uid: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl PodKey {
    /// The key of `pod` (empty strings where the pod has no value).
    pub fn of(pod: &k8s::Pod) -> Self {
        let m = &pod.metadata;
        PodKey {
            uid: m.uid.clone().unwrap_or_default(),
            namespace: m.namespace.clone().unwrap_or_default(),
            name: m.name.clone().unwrap_or_default(),
        }
    }

    /// `namespace/name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}_{}({})\"", self.name, self.namespace, self.uid)
    }
}

/// The UID of a pod.
pub fn uid(pod: &k8s::Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// The pod's restart policy (`Always` unless set).
pub fn restart_policy(pod: &k8s::Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// Whether the pod runs in the node's network namespace.
pub fn host_network(pod: &k8s::Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// The pod's grace period: `deletionGracePeriodSeconds` once the API server deletes it,
/// otherwise `terminationGracePeriodSeconds` (30 unless set); never negative.
pub fn grace_seconds(pod: &k8s::Pod) -> i64 {
    let deleting = pod
        .metadata
        .deletion_timestamp
        .as_ref()
        .and(pod.metadata.deletion_grace_period_seconds);
    deleting
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(DEFAULT_GRACE_SECONDS)
        .max(0)
}

/// The source a pod came from (its `kubernetes.io/config.source`).
pub fn source(pod: &k8s::Pod) -> &str {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .map_or("", String::as_str)
}

/// The kubelet's operating-system checks at admission, after its general predicates: a
/// pod labelled `kubernetes.io/os` for another system, or whose `spec.os.name` is not
/// this node's (`linux`), is refused with the kubelet's reason and message.
pub fn os_rejection(pod: &k8s::Pod) -> Option<(String, String)> {
    const OS: &str = "linux";
    let label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubernetes.io/os"));
    if label.is_some_and(|os| os != OS) {
        return Some((
            "PodOSSelectorNodeLabelDoesNotMatch".into(),
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label".into(),
        ));
    }
    let field = pod.spec.as_ref().and_then(|s| s.os.as_ref());
    if field.is_some_and(|os| os.name != OS) {
        return Some((
            "PodOSNotSupported".into(),
            "Failed to admit pod as the OS field doesn't match node OS".into(),
        ));
    }
    None
}

/// The annotation prefix of the AppArmor profile of one container before the field
/// (deprecated, still honoured).
const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Whether `pod` asks for AppArmor confinement: an `appArmorProfile` other than
/// `Unconfined` on the pod or a container, or a container's (deprecated) annotation
/// other than `unconfined` (the kubelet's `isRequired`).
fn wants_apparmor(pod: &k8s::Pod) -> bool {
    let confined = |p: Option<&k8s::AppArmorProfile>| p.is_some_and(|p| p.type_ != "Unconfined");
    let spec = pod.spec.as_ref();
    let pod_level = spec
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.app_armor_profile.as_ref());
    let containers = spec.into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .filter_map(|c| c.security_context.as_ref())
            .map(|sc| sc.app_armor_profile.as_ref())
    });
    let ephemeral = spec.into_iter().flat_map(|s| {
        s.ephemeral_containers
            .iter()
            .flatten()
            .filter_map(|c| c.security_context.as_ref())
            .map(|sc| sc.app_armor_profile.as_ref())
    });
    let annotated = pod
        .metadata
        .annotations
        .iter()
        .flatten()
        .any(|(k, v)| k.starts_with(APPARMOR_ANNOTATION_PREFIX) && v != "unconfined");
    confined(pod_level) || containers.chain(ephemeral).any(confined) || annotated
}

/// The kubelet's AppArmor check at admission: a pod that asks for AppArmor on a host
/// without it is refused (reason `AppArmor`), rather than run unconfined.
pub fn apparmor_rejection(pod: &k8s::Pod, host_enabled: bool) -> Option<(String, String)> {
    (!host_enabled && wants_apparmor(pod)).then(|| {
        (
            "AppArmor".into(),
            "Cannot enforce AppArmor: AppArmor is not enabled on the host".into(),
        )
    })
}

/// The statuses of the conditions the pod's readiness gates name, as its status has them
/// (others set them through the API; the pod's Ready follows them).
pub fn gate_conditions(pod: &k8s::Pod) -> Vec<(String, Option<String>)> {
    let Some(gates) = pod.spec.as_ref().and_then(|s| s.readiness_gates.as_ref()) else {
        return Vec::new();
    };
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    gates
        .iter()
        .map(|g| {
            let status = conditions
                .and_then(|cs| cs.iter().find(|c| c.type_ == g.condition_type))
                .map(|c| c.status.clone());
            (g.condition_type.clone(), status)
        })
        .collect()
}

/// Whether the pod came from a file, URL or plugin rather than the API server: the
/// API server knows it only through its mirror pod.
pub fn is_static(pod: &k8s::Pod) -> bool {
    let s = source(pod);
    !s.is_empty() && s != API_SOURCE
}

/// Whether the pod is a mirror pod (the API server's copy of a static pod).
pub fn is_mirror(pod: &k8s::Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CONFIG_MIRROR_ANNOTATION))
}

/// Whether the API server is deleting the pod (it has a deletion timestamp).
pub fn is_deleted(pod: &k8s::Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Whether two versions of a pod differ in what the agent acts on, as the kubelet
/// compares pods: the spec, labels, annotations (less `config.seen`, which the agent
/// writes) and the deletion fields. Status, resource versions and other server fields
/// do not count.
pub fn differ_semantically(a: &k8s::Pod, b: &k8s::Pod) -> bool {
    let (m, n) = (&a.metadata, &b.metadata);
    fn annotations(p: &k8s::Pod) -> impl Iterator<Item = (&String, &String)> {
        p.metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != CONFIG_SEEN_ANNOTATION)
    }
    a.spec != b.spec
        || m.labels != n.labels
        || m.annotations.is_some() != n.annotations.is_some()
        || !annotations(a).eq(annotations(b))
        || m.deletion_timestamp != n.deletion_timestamp
        || m.deletion_grace_period_seconds != n.deletion_grace_period_seconds
}

/// Makes `pod`, as the API server sent it, the pod the agent runs: the defaults it
/// would have filled in and the source annotation. Its name and UID are the API
/// server's.
pub fn make_api(pod: &mut k8s::Pod) {
    apply_defaults(pod);
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(CONFIG_SOURCE_ANNOTATION.into(), API_SOURCE.into());
}

/// The pod's app containers.
pub fn containers(pod: &k8s::Pod) -> &[k8s::Container] {
    pod.spec.as_ref().map_or(&[], |s| s.containers.as_slice())
}

/// The pod's init containers.
pub fn init_containers(pod: &k8s::Pod) -> &[k8s::Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
}

/// Whether `c` is a sidecar: an init container with `restartPolicy: Always` (KEP-753),
/// which keeps running beside the app containers once started.
pub fn is_restartable(c: &k8s::Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The app or init container called `name`.
pub fn container_named<'a>(pod: &'a k8s::Pod, name: &str) -> Option<&'a k8s::Container> {
    containers(pod)
        .iter()
        .chain(init_containers(pod))
        .find(|c| c.name == name)
}

/// Where a container is in the pod's spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// `spec.containers[i]`.
    App(usize),
    /// `spec.initContainers[i]`.
    Init(usize),
}

impl Place {
    /// The container at this place in `pod`.
    pub fn container(self, pod: &k8s::Pod) -> &k8s::Container {
        match self {
            Place::App(i) => &containers(pod)[i],
            Place::Init(i) => &init_containers(pod)[i],
        }
    }

    /// Its path in the pod, for messages (`spec.initContainers[0]`).
    pub fn field(self) -> String {
        match self {
            Place::App(i) => format!("spec.containers[{i}]"),
            Place::Init(i) => format!("spec.initContainers[{i}]"),
        }
    }
}

/// The containers that run beside each other once the pod is initialized — its app
/// containers, then its sidecars — with their places: those the kubelet probes and
/// resizes.
pub fn apps_and_sidecars(pod: &k8s::Pod) -> impl Iterator<Item = (Place, &k8s::Container)> {
    let apps = containers(pod)
        .iter()
        .enumerate()
        .map(|(i, c)| (Place::App(i), c));
    let sidecars = init_containers(pod)
        .iter()
        .enumerate()
        .filter(|(_, c)| is_restartable(c))
        .map(|(i, c)| (Place::Init(i), c));
    apps.chain(sidecars)
}

/// Whether the pod has a sidecar among its init containers.
pub fn has_sidecars(pod: &k8s::Pod) -> bool {
    init_containers(pod).iter().any(is_restartable)
}

/// The pod's ephemeral containers as containers (what the runtime runs is the same; no
/// probes, ports or lifecycle hooks are allowed on them, and none are run).
pub fn ephemeral_containers(pod: &k8s::Pod) -> Vec<k8s::Container> {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or(&[])
        .iter()
        .map(|e| k8s::Container {
            name: e.name.clone(),
            image: e.image.clone(),
            image_pull_policy: e.image_pull_policy.clone(),
            command: e.command.clone(),
            args: e.args.clone(),
            working_dir: e.working_dir.clone(),
            env: e.env.clone(),
            env_from: e.env_from.clone(),
            resources: e.resources.clone(),
            security_context: e.security_context.clone(),
            volume_mounts: e.volume_mounts.clone(),
            volume_devices: e.volume_devices.clone(),
            stdin: e.stdin,
            stdin_once: e.stdin_once,
            tty: e.tty,
            termination_message_path: e.termination_message_path.clone(),
            termination_message_policy: e.termination_message_policy.clone(),
            ..Default::default()
        })
        .collect()
}

/// The container ephemeral container `name` targets (`targetContainerName`, `kubectl
/// debug --target`): it runs in that container's process namespace.
pub fn ephemeral_target<'a>(pod: &'a k8s::Pod, name: &str) -> Option<&'a str> {
    pod.spec
        .as_ref()?
        .ephemeral_containers
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .target_container_name
        .as_deref()
        .filter(|t| !t.is_empty())
}

/// Whether an image reference names the `latest` tag (explicitly or by having no tag and
/// no digest): the kubelet then defaults the pull policy to `Always`.
pub(crate) fn is_latest(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

fn default_probe(probe: &mut Option<k8s::Probe>) {
    if let Some(p) = probe {
        p.period_seconds.get_or_insert(10);
        p.timeout_seconds.get_or_insert(1);
        p.success_threshold.get_or_insert(1);
        p.failure_threshold.get_or_insert(3);
        p.initial_delay_seconds.get_or_insert(0);
        if let Some(h) = p.http_get.as_mut() {
            h.path.get_or_insert_with(|| "/".into());
            h.scheme.get_or_insert_with(|| "HTTP".into());
        }
    }
}

fn default_container(c: &mut k8s::Container) {
    let image = c.image.clone().unwrap_or_default();
    c.image_pull_policy.get_or_insert_with(|| {
        if is_latest(&image) {
            "Always".into()
        } else {
            "IfNotPresent".into()
        }
    });
    c.termination_message_path
        .get_or_insert_with(|| "/dev/termination-log".into());
    c.termination_message_policy
        .get_or_insert_with(|| "File".into());
    for p in c.ports.iter_mut().flatten() {
        p.protocol.get_or_insert_with(|| "TCP".into());
    }
    default_probe(&mut c.liveness_probe);
    default_probe(&mut c.readiness_probe);
    default_probe(&mut c.startup_probe);
}

/// Fills in the defaults the API server would (restart policy, grace period, DNS policy,
/// pull policies, probe timings, port protocols), so that the agent and `GET /pods` see
/// the same values a kubelet would.
pub fn apply_defaults(pod: &mut k8s::Pod) {
    pod.metadata
        .namespace
        .get_or_insert_with(|| "default".into());
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.termination_grace_period_seconds
        .get_or_insert(DEFAULT_GRACE_SECONDS);
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    spec.security_context.get_or_insert_with(Default::default);
    for c in spec.containers.iter_mut() {
        default_container(c);
    }
    for c in spec.init_containers.iter_mut().flatten() {
        default_container(c);
    }
}

/// Makes `pod`, as read from origin `origin` of source `source`, the static pod the
/// agent runs: defaults filled in, the name suffixed with the node's (as the kubelet
/// names static pods), `spec.nodeName` set, and — when it has none — a UID: the one the
/// kubelet gives the same manifest read from `location` (so that each recognises the
/// other's pods), or, where that is not covered, one derived from its content, the node
/// and its origin. Either way the same manifest gets the same UID after a restart and a
/// changed one a new UID.
pub fn make_static(
    pod: &mut k8s::Pod,
    (source, origin): (&str, &str),
    node_name: &str,
    location: Option<kubelet::Location<'_>>,
) {
    let given = pod.metadata.uid.clone().filter(|u| !u.is_empty());
    // As the kubelet reads it: its defaults (so the spec, the mirror pod and container
    // hashes are the kubelet's too) and its UID.
    let kubelets = location
        .and_then(|l| kubelet::Read::of(pod).map(|r| (r, l)))
        .map(|(read, l)| {
            let uid = read.uid(node_name, l);
            *pod = read.pod;
            uid
        });
    apply_defaults(pod);
    let uid = given
        .or(kubelets)
        .unwrap_or_else(|| own_uid(pod, (source, origin), node_name));
    pod.metadata.uid = Some(uid);
    if matches!(location, Some(kubelet::Location::File(_))) {
        // The kubelet's toleration for pods from files: not evicted for node problems.
        tolerate_no_execute(pod);
    }
    if let Some(name) = pod.metadata.name.as_mut() {
        let suffix = format!("-{node_name}");
        if !name.ends_with(&suffix) {
            name.push_str(&suffix);
        }
    }
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node_name.to_owned());
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), source.into());
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    annotations.insert(CONFIG_ORIGIN_ANNOTATION.into(), origin.into());
}

/// Adds the toleration of every `NoExecute` taint, unless the pod has it.
fn tolerate_no_execute(pod: &mut k8s::Pod) {
    let all = k8s::Toleration {
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        ..Default::default()
    };
    let spec = pod.spec.get_or_insert_with(Default::default);
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    if !tolerations.contains(&all) {
        tolerations.push(all);
    }
}

/// wasmlet's own UID for a static pod (defaulted, not yet named for the node) the
/// kubelet's computation does not cover.
fn own_uid(pod: &k8s::Pod, (source, origin): (&str, &str), node_name: &str) -> String {
    let mut h = Sha256::new();
    // Canonical JSON: serde_json writes struct fields in declaration order and
    // BTreeMaps sorted, so equal pods hash equal.
    h.update(serde_json::to_vec(pod).unwrap_or_default());
    h.update(format!("host:{node_name}"));
    h.update(format!("{source}:{origin}"));
    let digest = h.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: &str) -> k8s::Pod {
        serde_json::from_str(json).expect("test pod")
    }

    const WEB: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},
        "spec":{"containers":[{"name":"web","image":"localhost/busybox:latest"}]}}"#;

    #[test]
    fn pods_for_another_os_are_refused_with_the_kubelets_reasons() {
        let linux = pod(
            r#"{"metadata":{"name":"a","labels":{"kubernetes.io/os":"linux"}},
            "spec":{"os":{"name":"linux"},"containers":[]}}"#,
        );
        assert_eq!(os_rejection(&linux), None);
        let field =
            pod(r#"{"metadata":{"name":"w"},"spec":{"os":{"name":"windows"},"containers":[]}}"#);
        assert_eq!(
            os_rejection(&field).map(|r| r.0).as_deref(),
            Some("PodOSNotSupported")
        );
        let label = pod(
            r#"{"metadata":{"name":"w","labels":{"kubernetes.io/os":"windows"}},
            "spec":{"os":{"name":"windows"},"containers":[]}}"#,
        );
        assert_eq!(
            os_rejection(&label).map(|r| r.0).as_deref(),
            Some("PodOSSelectorNodeLabelDoesNotMatch"),
            "the label is checked first"
        );
    }

    #[test]
    fn a_pod_asking_for_apparmor_is_refused_on_a_host_without_it() {
        let mut p: k8s::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}]}
        }))
        .expect("pod");
        assert_eq!(
            apparmor_rejection(&p, false),
            Some((
                "AppArmor".into(),
                "Cannot enforce AppArmor: AppArmor is not enabled on the host".into()
            ))
        );
        assert_eq!(apparmor_rejection(&p, true), None, "the host has it");
        p.spec.as_mut().expect("spec").containers[0].security_context = None;
        assert_eq!(apparmor_rejection(&p, false), None, "nothing asked");
        p.metadata.annotations = Some(
            [(
                format!("{APPARMOR_ANNOTATION_PREFIX}c"),
                "runtime/default".to_owned(),
            )]
            .into(),
        );
        assert!(
            apparmor_rejection(&p, false).is_some(),
            "the annotation asks too"
        );
    }

    #[test]
    fn static_pods_get_a_stable_uid_and_the_node_suffix() {
        let mut a = pod(WEB);
        make_static(&mut a, ("file", "web.yaml"), "node-a", None);
        let mut b = pod(WEB);
        make_static(&mut b, ("file", "web.yaml"), "node-a", None);
        assert_eq!(a.metadata.name.as_deref(), Some("web-node-a"));
        assert_eq!(a.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(uid(&a).len(), 32);
        assert_eq!(uid(&a), uid(&b), "same manifest, same UID");
        let ann = a.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(ann[CONFIG_SOURCE_ANNOTATION], "file");
        assert_eq!(ann[CONFIG_HASH_ANNOTATION], uid(&a));

        let mut other_file = pod(WEB);
        make_static(&mut other_file, ("file", "web2.yaml"), "node-a", None);
        assert_ne!(uid(&a), uid(&other_file), "the origin is part of the UID");
        let mut changed = pod(&WEB.replace("latest", "1.36"));
        make_static(&mut changed, ("file", "web.yaml"), "node-a", None);
        assert_ne!(uid(&a), uid(&changed), "a changed manifest is a new pod");

        // Read from a file: the kubelet's UID for it (see the kubelet module's own tests).
        let path = std::path::Path::new("/etc/kubernetes/manifests/web.yaml");
        let mut from_file = pod(WEB);
        let at = Some(kubelet::Location::File(path));
        make_static(&mut from_file, ("file", "web.yaml"), "node-a", at);
        let kubelets = kubelet::uid(&pod(WEB), "node-a", kubelet::Location::File(path));
        assert_eq!(Some(uid(&from_file)), kubelets.as_deref());
        assert_ne!(uid(&from_file), uid(&a));
    }

    #[test]
    fn defaults_follow_the_api_server() {
        let mut p = pod(r#"{"metadata":{"name":"p"},"spec":{"containers":[
              {"name":"a","image":"busybox","readinessProbe":{"httpGet":{"port":80}}},
              {"name":"b","image":"busybox:1.36","ports":[{"containerPort":80}]}]}}"#);
        apply_defaults(&mut p);
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        let a = &spec.containers[0];
        assert_eq!(a.image_pull_policy.as_deref(), Some("Always"));
        let probe = a.readiness_probe.as_ref().expect("probe");
        assert_eq!(
            (
                probe.period_seconds,
                probe.timeout_seconds,
                probe.failure_threshold
            ),
            (Some(10), Some(1), Some(3))
        );
        assert_eq!(
            probe.http_get.as_ref().and_then(|h| h.path.as_deref()),
            Some("/")
        );
        let b = &spec.containers[1];
        assert_eq!(b.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            b.ports.as_ref().expect("ports")[0].protocol.as_deref(),
            Some("TCP")
        );
        assert!(is_latest("localhost/busybox"));
        assert!(is_latest("registry:5000/busybox"));
        assert!(!is_latest("registry:5000/busybox:1"));
        assert!(!is_latest("busybox@sha256:abcd"));
    }

    #[test]
    fn invalid_pods_name_the_field() {
        let cases = [
            (
                r#"{"metadata":{"name":"Web"},"spec":{"containers":[{"name":"a","image":"i"}]}}"#,
                "metadata.name",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"a","image":"i"},{"name":"a","image":"i"}]}}"#,
                "spec.containers[1].name",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"initContainers":[{"name":"a","image":"i"}],"containers":[{"name":"a","image":"i"}]}}"#,
                "spec.containers[0].name",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"a"}]}}"#,
                "spec.containers[0].image",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"containers":[]}}"#,
                "spec.containers",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"a","image":"i","ports":[{"containerPort":0}]}]}}"#,
                "spec.containers[0].ports[0].containerPort",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"a","image":"i","volumeMounts":[{"name":"v","mountPath":"/v"}]}]}}"#,
                "spec.containers[0].volumeMounts[0].name",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"a","image":"i","livenessProbe":{"periodSeconds":3}}]}}"#,
                "spec.containers[0].livenessProbe",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"a","image":"i"}],"ephemeralContainers":[{"name":"a","image":"i"}]}}"#,
                "spec.ephemeralContainers[0].name",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"a","image":"i"}],"ephemeralContainers":[{"name":"d","image":"i","ports":[{"containerPort":80}]}]}}"#,
                "spec.ephemeralContainers[0].ports",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"a","image":"i"}],"ephemeralContainers":[{"name":"d","image":"i","targetContainerName":"b"}]}}"#,
                "spec.ephemeralContainers[0].targetContainerName",
            ),
            (
                r#"{"metadata":{"name":"w"},"spec":{"restartPolicy":"Sometimes","containers":[{"name":"a","image":"i"}]}}"#,
                "spec.restartPolicy",
            ),
        ];
        for (json, field) in cases {
            let err = validate(&pod(json)).expect_err(json);
            assert_eq!(err.field, field, "{json}: {err}");
        }
        validate(&pod(WEB)).expect("valid");
        let dup = validate(&pod(cases[1].0)).expect_err("dup");
        assert_eq!(
            dup.to_string(),
            "spec.containers[1].name: Duplicate value: \"a\""
        );
    }

    #[test]
    fn custom_probes_come_from_annotations() {
        let with = |annotation: &str, probe: &str| {
            pod(&format!(
                r#"{{"metadata":{{"name":"r","annotations":{{"probe.wasmlet.io/redis.livenessProbe":"{annotation}"}}}},
                   "spec":{{"containers":[{{"name":"redis","image":"i"{probe}}}]}}}}"#
            ))
        };
        let p = with(
            "redis-ping port=6379 password=",
            r#","livenessProbe":{"periodSeconds":5}"#,
        );
        validate(&p).expect("a custom probe needs no handler");
        assert_eq!(
            custom_probe(&p, "redis", "livenessProbe"),
            Some(Ok(CustomProbe {
                kind: "redis-ping".into(),
                args: vec![
                    ("port".into(), "6379".into()),
                    ("password".into(), String::new())
                ],
            }))
        );
        assert_eq!(custom_probe(&p, "redis", "readinessProbe"), None);
        let bad =
            validate(&with("redis-ping 6379", r#","livenessProbe":{}"#)).expect_err("bad arg");
        assert_eq!(
            bad.field,
            "metadata.annotations[probe.wasmlet.io/redis.livenessProbe]"
        );
        let missing = validate(&with("redis-ping", "")).expect_err("no such probe");
        assert!(
            missing.message.contains("has no livenessProbe"),
            "{missing}"
        );
        let plain = pod(
            r#"{"metadata":{"name":"r"},"spec":{"containers":[{"name":"c","image":"i","livenessProbe":{}}]}}"#,
        );
        assert!(
            validate(&plain).is_err(),
            "without the annotation a probe needs a handler"
        );
    }

    #[test]
    fn keys_print_the_kubelet_way() {
        let mut p = pod(WEB);
        make_static(&mut p, ("file", "web.yaml"), "n", None);
        let key = PodKey::of(&p);
        assert_eq!(key.to_string(), format!("\"web-n_default({})\"", uid(&p)));
        assert_eq!(key.full_name(), "default/web-n");
    }
}
