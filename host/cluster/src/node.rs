//! The Node object: registration, and its status in the kubelet's words.
//!
//! Status is computed every 10 s and sent (a merge PATCH of `nodes/NAME/status`, which
//! the Node authorizer allows a node's own identity) when it changed — heartbeat times
//! aside — or when 5 minutes passed since the last one sent (nodeStatusReportFrequency).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use wasmlet_agent::node::NodeFacts;

use crate::error::ClusterError;

/// How often the status is computed (nodeStatusUpdateFrequency).
pub const UPDATE_FREQUENCY: Duration = Duration::from_secs(10);
/// The longest time between two status reports (nodeStatusReportFrequency).
pub const REPORT_FREQUENCY: Duration = Duration::from_secs(300);

/// How often the node reports, and its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// nodeStatusUpdateFrequency (10 s): how often the status is computed.
    pub update: Duration,
    /// nodeStatusReportFrequency (5 min): the longest time between two reports.
    pub report: Duration,
    /// nodeLeaseDurationSeconds (40): the lease's duration; renewed every quarter.
    pub lease_seconds: i32,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            update: UPDATE_FREQUENCY,
            report: REPORT_FREQUENCY,
            lease_seconds: crate::lease::DURATION_SECONDS,
        }
    }
}

/// What the node status says beyond [`NodeFacts`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeState {
    /// `None` when ready; otherwise why not (the runtime is down, PLEG is not healthy).
    pub not_ready: Option<String>,
    /// `<runtime name>://<runtime version>` from the CRI's `Version`.
    pub runtime_version: String,
    /// The port the agent serves its API on (daemonEndpoints.kubeletEndpoint.Port).
    pub port: i32,
    /// The eviction manager's pressure conditions that are true.
    pub pressure: Pressure,
    /// The images on the node, largest first (`status.images`).
    pub images: std::sync::Arc<Vec<k8s::ContainerImage>>,
    /// The device plugins' resources.
    pub devices: Devices,
}

/// The extended resources device plugins advertise, as the node status carries them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Devices {
    /// Every device listed, per resource.
    pub capacity: BTreeMap<String, u64>,
    /// The healthy ones, per resource (a resource absent here has the allocatable of
    /// its capacity).
    pub allocatable: BTreeMap<String, u64>,
    /// Resources whose plugin is gone for good: their capacity is set to 0 rather than
    /// dropped, as the kubelet does, telling them from cluster-level resources.
    pub removed: Vec<String>,
}

impl Devices {
    /// Sets the devices' entries of `status`'s capacity and allocatable.
    fn apply(&self, status: &mut k8s::NodeStatus) {
        let count = |n: u64| Quantity(n.to_string());
        let capacity = status.capacity.get_or_insert_default();
        let allocatable = status.allocatable.get_or_insert_default();
        for (resource, n) in &self.capacity {
            capacity.insert(resource.clone(), count(*n));
            let free = self.allocatable.get(resource).copied().unwrap_or(*n);
            allocatable.insert(resource.clone(), count(free));
        }
        for resource in &self.removed {
            capacity.insert(resource.clone(), count(0));
            allocatable.insert(resource.clone(), count(0));
        }
    }
}

/// The node's pressure conditions (MemoryPressure, DiskPressure, PIDPressure).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// MemoryPressure.
    pub memory: bool,
    /// DiskPressure.
    pub disk: bool,
    /// PIDPressure.
    pub pid: bool,
}

/// `containerRuntimeVersion` as the kubelet writes it: `<name>://<version>`, the version
/// read the way Kubernetes reads a generic version — its leading dotted numbers, an
/// optional `v` and anything after them dropped (Debian's containerd says `1.6.20~ds1`;
/// the node says `containerd://1.6.20`). A version without leading numbers is kept as
/// it is.
pub fn runtime_version(name: &str, version: &str) -> String {
    let text = version.trim();
    let digits = text.strip_prefix('v').unwrap_or(text);
    let end = digits
        .char_indices()
        .take_while(|(i, c)| {
            c.is_ascii_digit()
                || (*c == '.'
                    && digits[..*i].ends_with(|p: char| p.is_ascii_digit())
                    && digits[i + 1..].starts_with(|n: char| n.is_ascii_digit()))
        })
        .last()
        .map_or(0, |(i, c)| i + c.len_utf8());
    let version = if end == 0 { text } else { &digits[..end] };
    format!("{name}://{version}")
}

/// The machine as `nodeInfo` describes it.
pub fn node_info(runtime_version: &str) -> k8s::NodeSystemInfo {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let os_image = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| "Linux".into());
    k8s::NodeSystemInfo {
        machine_id: read("/etc/machine-id"),
        system_uuid: read("/sys/class/dmi/id/product_uuid"),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        kernel_version: read("/proc/sys/kernel/osrelease"),
        os_image,
        operating_system: "linux".into(),
        architecture: arch().into(),
        container_runtime_version: runtime_version.to_owned(),
        kubelet_version: kubelet_version(),
        // Deprecated, and still what the kubelet 1.33 writes there.
        kube_proxy_version: kubelet_version(),
        ..Default::default()
    }
}

/// The Kubernetes version whose kubelet wasmlet stands in for (its KubeletConfiguration,
/// its flags, its feature gates' defaults, the conformance tests it passes). The API
/// servers it serves are that kubelet's: 1.30 to 1.33.
pub const KUBERNETES_VERSION: &str = "1.33.3";

/// The version the node reports and `kubelet --version` prints: the Kubernetes version
/// implemented, with wasmlet's own as semantic-version build metadata
/// (`v1.33.3+wasmlet.0.1.0`), so that skew checks (kubeadm's preflight and upgrade
/// policy, `[MinimumKubeletVersion:…]` specs, anything comparing node versions) read it
/// as the kubelet 1.33.3 it stands in for.
pub fn kubelet_version() -> String {
    format!(
        "v{KUBERNETES_VERSION}+wasmlet.{}",
        env!("CARGO_PKG_VERSION")
    )
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn time(rfc3339: &str) -> Option<Time> {
    serde_json::from_value(serde_json::Value::String(rfc3339.to_owned())).ok()
}

/// The node's status at `now`: capacity and allocatable, addresses, nodeInfo, daemon
/// endpoint and the four conditions in the kubelet's words. A condition keeps its
/// `lastTransitionTime` from `previous` while its status stays the same.
pub fn status(
    facts: &NodeFacts,
    state: &NodeState,
    info: &k8s::NodeSystemInfo,
    now: &str,
    previous: Option<&k8s::NodeStatus>,
) -> k8s::NodeStatus {
    let base = facts.object(state.not_ready.is_none(), "", now);
    let mut status = base.status.unwrap_or_default();
    let condition = |kind: &str, ok: bool, reason: &str, message: &str| {
        let value = if kind == "Ready" { ok } else { !ok };
        let value = if value { "True" } else { "False" };
        let since = previous
            .and_then(|p| p.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == kind))
            .filter(|c| c.status == value)
            .and_then(|c| c.last_transition_time.clone());
        k8s::NodeCondition {
            type_: kind.into(),
            status: value.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_heartbeat_time: time(now),
            last_transition_time: since.or_else(|| time(now)),
        }
    };
    let ready = match &state.not_ready {
        None => condition(
            "Ready",
            true,
            "KubeletReady",
            "kubelet is posting ready status",
        ),
        Some(why) => condition("Ready", false, "KubeletNotReady", why),
    };
    let pressures = pressure_words(state.pressure);
    let mut conditions: Vec<k8s::NodeCondition> = pressures
        .into_iter()
        .map(
            |(kind, on, (reason_on, message_on), (reason_off, message_off))| {
                if on {
                    condition(kind, false, reason_on, message_on)
                } else {
                    condition(kind, true, reason_off, message_off)
                }
            },
        )
        .collect();
    conditions.push(ready);
    status.conditions = Some(conditions);
    status.node_info = Some(info.clone());
    status.daemon_endpoints = Some(k8s::NodeDaemonEndpoints {
        kubelet_endpoint: Some(k8s::DaemonEndpoint { port: state.port }),
    });
    status.images = (!state.images.is_empty()).then(|| state.images.to_vec());
    state.devices.apply(&mut status);
    status
}

/// Each pressure condition and whether it is on, with the kubelet's reason and message
/// when it is on and when it is off.
type PressureWords = (
    &'static str,
    bool,
    (&'static str, &'static str),
    (&'static str, &'static str),
);

fn pressure_words(p: Pressure) -> [PressureWords; 3] {
    [
        (
            "MemoryPressure",
            p.memory,
            (
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
            ),
            (
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
        ),
        (
            "DiskPressure",
            p.disk,
            ("KubeletHasDiskPressure", "kubelet has disk pressure"),
            ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ),
        (
            "PIDPressure",
            p.pid,
            (
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
            ),
            (
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
        ),
    ]
}

/// The status with heartbeat times taken out: two statuses that differ only in those
/// need no report.
fn without_heartbeats(status: &k8s::NodeStatus) -> k8s::NodeStatus {
    let mut s = status.clone();
    for c in s.conditions.iter_mut().flatten() {
        c.last_heartbeat_time = None;
    }
    s
}

/// Whether a computed status is sent: when it changed (heartbeats aside) since the last
/// one sent, or when that one is `report` old (nodeStatusReportFrequency).
pub fn needs_report(
    new: &k8s::NodeStatus,
    last_sent: Option<(&k8s::NodeStatus, Duration)>,
    report: Duration,
) -> bool {
    match last_sent {
        None => true,
        Some((old, age)) => age >= report || without_heartbeats(old) != without_heartbeats(new),
    }
}

/// The Node to register: name, the well-known labels and `labels`, `taints`
/// (registerWithTaints), and its first status.
pub fn object(facts: &NodeFacts, taints: &[k8s::Taint], status: k8s::NodeStatus) -> k8s::Node {
    let base = facts.object(true, "", "");
    k8s::Node {
        metadata: ObjectMeta {
            name: Some(facts.name.clone()),
            labels: base.metadata.labels,
            ..Default::default()
        },
        spec: Some(k8s::NodeSpec {
            taints: (!taints.is_empty()).then(|| taints.to_vec()),
            ..Default::default()
        }),
        status: Some(status),
    }
}

/// Registers `node`: creates it, or adopts the Node of the same name that exists
/// (its labels brought up to date), as the kubelet does on restart. Then sends its
/// status (a create ignores the status it is given).
pub async fn register(client: &kube::Client, node: &k8s::Node) -> Result<k8s::Node, ClusterError> {
    let api: Api<k8s::Node> = Api::all(client.clone());
    let name = node.metadata.name.clone().unwrap_or_default();
    let what = format!("registering node {name}");
    let registered = match api.create(&PostParams::default(), node).await {
        Ok(created) => {
            tracing::info!(node = %name, "Successfully registered node");
            created
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
            let adopted = api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": labels}})),
                )
                .await
                .map_err(ClusterError::api(&what))?;
            tracing::info!(node = %name, "node already registered; adopted it");
            adopted
        }
        Err(e) => return Err(ClusterError::api(what)(e)),
    };
    match &node.status {
        Some(status) => send_status(client, &name, status).await,
        None => Ok(registered),
    }
}

/// Sends `status` as a merge PATCH of `nodes/NAME/status`.
pub async fn send_status(
    client: &kube::Client,
    name: &str,
    status: &k8s::NodeStatus,
) -> Result<k8s::Node, ClusterError> {
    let api: Api<k8s::Node> = Api::all(client.clone());
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map_err(ClusterError::api(format!(
        "updating the status of node {name}"
    )))
}

/// An owner reference to `node`, for objects that go with it (its lease, mirror pods).
pub fn owner(node: &k8s::Node) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone()?,
        uid: node.metadata.uid.clone()?,
        ..Default::default()
    })
}

/// How often the status is looked at while the node is not Ready yet.
pub const FAST_UPDATE: Duration = Duration::from_millis(200);

/// Whether `status` says Ready.
pub fn is_ready(status: &k8s::NodeStatus) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// How many times a status report is tried within one update period (the kubelet's
/// nodeStatusUpdateRetry).
const REPORT_TRIES: usize = 5;

/// Registers the node (retrying until the API server takes it), keeps its lease, and
/// reports its status every `timing.update` when it changed or every `timing.report`,
/// until `shutdown` turns true. `state` says, each time, whether
/// the node is ready and what runs it; `registered_tx` gets the registered Node as an
/// owner reference.
pub async fn run(
    client: kube::Client,
    facts: NodeFacts,
    taints: Vec<k8s::Taint>,
    timing: Timing,
    state: impl Fn() -> NodeState + Send + Sync + 'static,
    registered_tx: tokio::sync::watch::Sender<Option<OwnerReference>>,
    shutdown: CancellationToken,
) {
    let info = node_info(&state().runtime_version);
    let now = || wasmlet_agent::time::now_rfc3339();
    let mut backoff = Duration::from_secs(1);
    let (registered, mut last) = loop {
        let first = status(&facts, &state(), &info, &now(), None);
        match register(&client, &object(&facts, &taints, first.clone())).await {
            Ok(node) => break (node, first),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "Unable to register node with API server");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = shutdown.cancelled() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(7));
            }
        }
    };
    let heartbeat = crate::lease::Heartbeat::new(client.clone(), &facts.name, owner(&registered))
        .duration(timing.lease_seconds);
    let _ = registered_tx.send(owner(&registered));
    tokio::spawn(heartbeat.run(shutdown.clone()));
    let mut sent_at = tokio::time::Instant::now();
    loop {
        // Until the node has reported Ready once, its status is looked at every
        // FAST_UPDATE rather than every update period (the kubelet's fast node status
        // update at start): a node is Ready as soon as its runtime answers.
        let wait = if is_ready(&last) {
            timing.update
        } else {
            FAST_UPDATE.min(timing.update)
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.cancelled() => return,
        }
        let new = status(&facts, &state(), &info, &now(), Some(&last));
        if !needs_report(&new, Some((&last, sent_at.elapsed())), timing.report) {
            continue;
        }
        for attempt in 1..=REPORT_TRIES {
            match send_status(&client, &facts.name, &new).await {
                Ok(_) => {
                    last = new;
                    sent_at = tokio::time::Instant::now();
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, attempt, "Error updating node status, will retry");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_versions_are_read_as_generic_versions() {
        assert_eq!(
            runtime_version("containerd", "1.6.20~ds1"),
            "containerd://1.6.20"
        );
        assert_eq!(
            runtime_version("containerd", "v1.7.2"),
            "containerd://1.7.2"
        );
        assert_eq!(runtime_version("cri-o", "1.28.1-rc.2"), "cri-o://1.28.1");
        assert_eq!(runtime_version("x", "2."), "x://2");
        assert_eq!(runtime_version("sim", "devel"), "sim://devel");
    }

    fn facts() -> NodeFacts {
        NodeFacts {
            name: "node-a".into(),
            hostname: "node-a".into(),
            ip: "10.0.0.5".into(),
            cpus: 4,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
            max_pods: 110,
            labels: BTreeMap::from([("zone".to_string(), "a".to_string())]),
            reserved: Default::default(),
            hugepages: Vec::new(),
        }
    }

    fn condition<'a>(s: &'a k8s::NodeStatus, kind: &str) -> &'a k8s::NodeCondition {
        s.conditions
            .as_ref()
            .and_then(|cs| cs.iter().find(|c| c.type_ == kind))
            .expect("condition")
    }

    #[test]
    fn device_resources_are_capacity_and_allocatable_and_stay_at_zero_once_removed() {
        let state = NodeState {
            devices: Devices {
                capacity: BTreeMap::from([
                    ("example.com/gpu".into(), 4),
                    ("example.com/nic".into(), 0),
                ]),
                allocatable: BTreeMap::from([("example.com/gpu".into(), 3)]),
                removed: vec!["example.com/old".into()],
            },
            ..NodeState::default()
        };
        let info = node_info("containerd://1.6.20");
        let s = status(&facts(), &state, &info, "2026-11-28T10:00:00Z", None);
        let (cap, alloc) = (
            s.capacity.expect("capacity"),
            s.allocatable.expect("allocatable"),
        );
        let q = |m: &BTreeMap<String, Quantity>, k: &str| m.get(k).map(|q| q.0.clone());
        assert_eq!(q(&cap, "example.com/gpu").as_deref(), Some("4"));
        assert_eq!(
            q(&alloc, "example.com/gpu").as_deref(),
            Some("3"),
            "the healthy ones"
        );
        assert_eq!(
            q(&alloc, "example.com/nic").as_deref(),
            Some("0"),
            "its capacity's"
        );
        assert_eq!(q(&cap, "example.com/old").as_deref(), Some("0"));
        assert_eq!(q(&alloc, "example.com/old").as_deref(), Some("0"));
        assert_eq!(
            q(&cap, "pods").as_deref(),
            Some("110"),
            "the node's own resources stay"
        );
    }

    #[test]
    fn conditions_speak_the_kubelets_words_and_keep_their_transition_times() {
        let state = NodeState {
            not_ready: None,
            runtime_version: "containerd://1.7.24".into(),
            port: 10250,
            pressure: Pressure::default(),
            images: Default::default(),
            devices: Devices::default(),
        };
        let info = node_info(&state.runtime_version);
        assert_eq!(info.container_runtime_version, "containerd://1.7.24");
        assert_eq!(info.operating_system, "linux");
        let first = status(&facts(), &state, &info, "2026-11-22T10:00:00Z", None);
        let ready = condition(&first, "Ready");
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_deref(),
                ready.message.as_deref()
            ),
            (
                "True",
                Some("KubeletReady"),
                Some("kubelet is posting ready status")
            )
        );
        let memory = condition(&first, "MemoryPressure");
        assert_eq!(
            (memory.status.as_str(), memory.reason.as_deref()),
            ("False", Some("KubeletHasSufficientMemory"))
        );
        assert_eq!(
            condition(&first, "PIDPressure").reason.as_deref(),
            Some("KubeletHasSufficientPID")
        );
        assert_eq!(
            condition(&first, "DiskPressure").reason.as_deref(),
            Some("KubeletHasNoDiskPressure")
        );
        assert_eq!(
            first
                .daemon_endpoints
                .as_ref()
                .and_then(|d| d.kubelet_endpoint.as_ref())
                .map(|e| e.port),
            Some(10250)
        );
        assert_eq!(
            first.capacity.as_ref().map(|c| c["pods"].0.as_str()),
            Some("110")
        );

        // Ten seconds later, unchanged: new heartbeats, same transition, no report due.
        let later = status(
            &facts(),
            &state,
            &info,
            "2026-11-22T10:00:10Z",
            Some(&first),
        );
        let ready = condition(&later, "Ready");
        assert_eq!(ready.last_transition_time, time("2026-11-22T10:00:00Z"));
        assert_eq!(ready.last_heartbeat_time, time("2026-11-22T10:00:10Z"));
        assert!(!needs_report(
            &later,
            Some((&first, Duration::from_secs(10))),
            REPORT_FREQUENCY
        ));
        assert!(needs_report(
            &later,
            Some((&first, REPORT_FREQUENCY)),
            REPORT_FREQUENCY
        ));
        assert!(needs_report(&later, None, REPORT_FREQUENCY));

        // The runtime goes away: NotReady, with the reason, from now on.
        let down = NodeState {
            not_ready: Some("container runtime is down".into()),
            ..state
        };
        let failing = status(&facts(), &down, &info, "2026-11-22T10:00:20Z", Some(&later));
        let ready = condition(&failing, "Ready");
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_deref(),
                ready.message.as_deref()
            ),
            (
                "False",
                Some("KubeletNotReady"),
                Some("container runtime is down")
            )
        );
        assert_eq!(ready.last_transition_time, time("2026-11-22T10:00:20Z"));
        assert!(needs_report(
            &failing,
            Some((&later, Duration::from_secs(10))),
            REPORT_FREQUENCY
        ));

        // The eviction manager sees memory pressure: the condition turns, in the
        // kubelet's words, and a report is due.
        let pressed = NodeState {
            pressure: Pressure {
                memory: true,
                ..Pressure::default()
            },
            ..down
        };
        let short = status(
            &facts(),
            &pressed,
            &info,
            "2026-11-22T10:00:30Z",
            Some(&failing),
        );
        let memory = condition(&short, "MemoryPressure");
        assert_eq!(
            (
                memory.status.as_str(),
                memory.reason.as_deref(),
                memory.message.as_deref()
            ),
            (
                "True",
                Some("KubeletHasInsufficientMemory"),
                Some("kubelet has insufficient memory available")
            )
        );
        assert_eq!(memory.last_transition_time, time("2026-11-22T10:00:30Z"));
        assert_eq!(condition(&short, "DiskPressure").status, "False");
        assert!(needs_report(
            &short,
            Some((&failing, Duration::from_secs(10))),
            REPORT_FREQUENCY
        ));
    }

    #[test]
    fn the_registered_object_carries_labels_and_taints() {
        let taint = k8s::Taint {
            key: "dedicated".into(),
            value: Some("wasm".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let node = object(
            &facts(),
            std::slice::from_ref(&taint),
            k8s::NodeStatus::default(),
        );
        let labels = node.metadata.labels.expect("labels");
        assert_eq!(labels["kubernetes.io/hostname"], "node-a");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["zone"], "a");
        assert!(labels.contains_key("kubernetes.io/arch"));
        assert_eq!(node.spec.and_then(|s| s.taints), Some(vec![taint]));
    }
}
