//! A pod and its containers as CRI configurations: `PodSandboxConfig` and
//! `ContainerConfig`, with the labels that let the agent find them again, environment
//! variables resolved, volumes mounted, resources as cgroup limits and the security
//! context carried over.
//!
//! Nothing here touches the node: what a container needs on the node's filesystem before
//! it starts (a hostPath made, a sub path's directory, its `/etc/hosts`, its termination
//! message file) comes back beside its configuration as [`NodeFile`]s, for the agent to
//! make.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::quantity::parse_quantity;
use k8s_openapi::api::core::v1 as k8s;
use wasmlet_cri_api::proto;

use crate::pod;
use crate::runtime::{
    CONTAINER_HASH_ANNOTATION, CONTAINER_NAME_LABEL, CONTAINER_TYPE_ANNOTATION, GRACE_ANNOTATION,
    HOST_NETWORK_ANNOTATION, NODE_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
    RESTART_COUNT_ANNOTATION, TERMINATION_MESSAGE_PATH_ANNOTATION,
    TERMINATION_MESSAGE_POLICY_ANNOTATION, container_hash,
};
use crate::status::qos_class;

mod dns;
mod env;
mod mounts;
mod node_cgroups;
pub mod services;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use dns::{dns_config, parse_resolv_conf};
use env::environment;
pub use env::{EnvData, expand, field_ref, resource_ref};
pub use mounts::{
    ETC_HOSTS, FqdnTooLong, HostPathKind, HostsFile, MissingVariables, NodeFile, empty_dir_path,
    expand_sub_path, hostname_and_domain, hosts_file, kernel_hostname, managed_volume_kind,
    managed_volume_path,
};
pub use node_cgroups::{NodeCgroups, SwapBehavior};

/// Where a pod's sandbox goes in the node's cgroup tree (the agent's pod cgroups).
pub trait CgroupParent {
    /// The cgroup parent of `pod`'s sandbox, in the form the runtime takes.
    fn cgroup_parent(&self, pod: &k8s::Pod) -> String;
}

/// No cgroup tree of the node's own: pods go where the runtime puts them.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCgroups;

impl CgroupParent for NoCgroups {
    fn cgroup_parent(&self, _pod: &k8s::Pod) -> String {
        String::new()
    }
}

/// The node facts pod configurations depend on; `C` is the node's pod cgroup tree.
#[derive(Debug)]
pub struct NodeContext<C = NoCgroups> {
    /// The node's name.
    pub node_name: String,
    /// The node's hostname.
    pub hostname: String,
    /// The node's IP.
    pub host_ip: String,
    /// Where pod log directories go (`<dir>/<namespace>_<name>_<uid>`).
    pub pod_logs_dir: PathBuf,
    /// Where pod volumes and termination message files go (`<dir>/<uid>/…`).
    pub pods_dir: PathBuf,
    /// The node's resolver configuration (`/etc/resolv.conf`), for `dnsPolicy: Default`
    /// and for ClusterFirst without a cluster DNS.
    pub dns: proto::DnsConfig,
    /// The cluster's DNS servers (`clusterDNS`): ClusterFirst pods resolve through them.
    pub cluster_dns: Vec<String>,
    /// The cluster's DNS domain (`clusterDomain`, e.g. `cluster.local`; empty: none).
    pub cluster_domain: String,
    /// The node's hosts file, which pods on the node's network get (`/etc/hosts`).
    pub hosts_file: PathBuf,
    /// The node's memory, for the OOM score of burstable pods.
    pub memory_bytes: u64,
    /// The node's allocatable resources: what a `resourceFieldRef` to a limit the
    /// container does not set reads, as with the kubelet.
    pub allocatable: BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    /// The pods' cgroup tree (`None`: pods go where the runtime puts them).
    pub pod_cgroups: Option<Arc<C>>,
    /// What the node's cgroups add to each container (huge pages, v2's unified files).
    pub cgroups: NodeCgroups,
}

// By hand: derived, both would ask the cgroup tree to be `Default` / `Clone` too.
impl<C> Default for NodeContext<C> {
    fn default() -> Self {
        NodeContext {
            node_name: String::new(),
            hostname: String::new(),
            host_ip: String::new(),
            pod_logs_dir: PathBuf::new(),
            pods_dir: PathBuf::new(),
            dns: proto::DnsConfig::default(),
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            hosts_file: PathBuf::new(),
            memory_bytes: 0,
            allocatable: BTreeMap::new(),
            pod_cgroups: None,
            cgroups: NodeCgroups::default(),
        }
    }
}

impl<C> Clone for NodeContext<C> {
    fn clone(&self) -> Self {
        NodeContext {
            node_name: self.node_name.clone(),
            hostname: self.hostname.clone(),
            host_ip: self.host_ip.clone(),
            pod_logs_dir: self.pod_logs_dir.clone(),
            pods_dir: self.pods_dir.clone(),
            dns: self.dns.clone(),
            cluster_dns: self.cluster_dns.clone(),
            cluster_domain: self.cluster_domain.clone(),
            hosts_file: self.hosts_file.clone(),
            memory_bytes: self.memory_bytes,
            allocatable: self.allocatable.clone(),
            pod_cgroups: self.pod_cgroups.clone(),
            cgroups: self.cgroups.clone(),
        }
    }
}

/// Why a container's configuration could not be made: the kubelet's
/// `CreateContainerConfigError`, with a message naming what is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// What is wrong.
    pub message: String,
    /// Whether a volume could not be prepared (the kubelet's `FailedMount`).
    pub volume: bool,
}

impl ConfigError {
    /// An error about the container's configuration.
    pub fn new(message: String) -> Self {
        ConfigError {
            message,
            volume: false,
        }
    }

    /// Whether a volume could not be prepared.
    pub fn is_volume(&self) -> bool {
        self.volume
    }
}

/// The masked paths the kubelet gives unprivileged containers.
pub const MASKED_PATHS: [&str; 11] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
/// The read-only paths the kubelet gives unprivileged containers.
pub const READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The pod's log directory.
pub fn log_directory<C>(pod: &k8s::Pod, ctx: &NodeContext<C>) -> PathBuf {
    let m = &pod.metadata;
    pod_log_directory(
        ctx,
        m.namespace.as_deref().unwrap_or("default"),
        m.name.as_deref().unwrap_or(""),
        pod::uid(pod),
    )
}

/// The log directory of the pod `namespace/name` with `uid`:
/// `<podLogsDir>/<namespace>_<name>_<uid>`.
pub fn pod_log_directory<C>(
    ctx: &NodeContext<C>,
    namespace: &str,
    name: &str,
    uid: &str,
) -> PathBuf {
    ctx.pod_logs_dir.join(format!("{namespace}_{name}_{uid}"))
}

/// Where the kubelet links each container's log for log shippers (the legacy log path,
/// `/var/log/containers/<pod>_<namespace>_<container>-<id>.log`): `containers/` beside the
/// pod log directory, the file name cut to ext4's 255 bytes.
pub fn legacy_log_symlink<C>(
    ctx: &NodeContext<C>,
    (pod, namespace): (&str, &str),
    container: &str,
    id: &str,
) -> PathBuf {
    const SUFFIX: &str = ".log";
    let dir = ctx
        .pod_logs_dir
        .parent()
        .unwrap_or(std::path::Path::new("/"))
        .join("containers");
    let mut name = format!("{pod}_{namespace}_{container}-{id}");
    let mut max = 255 - SUFFIX.len();
    if name.len() > max {
        while !name.is_char_boundary(max) {
            max -= 1;
        }
        name.truncate(max);
    }
    dir.join(name + SUFFIX)
}

/// The directory holding the pod's volumes and files.
pub fn pod_dir<C>(pod: &k8s::Pod, ctx: &NodeContext<C>) -> PathBuf {
    ctx.pods_dir.join(pod::uid(pod))
}

fn ns_mode(node: bool, otherwise: proto::NamespaceMode) -> i32 {
    if node {
        proto::NamespaceMode::Node as i32
    } else {
        otherwise as i32
    }
}

fn namespace_options(pod: &k8s::Pod) -> proto::NamespaceOption {
    let spec = pod.spec.clone().unwrap_or_default();
    let shared_pid = spec.share_process_namespace.unwrap_or(false);
    proto::NamespaceOption {
        network: ns_mode(pod::host_network(pod), proto::NamespaceMode::Pod),
        pid: ns_mode(
            spec.host_pid.unwrap_or(false),
            if shared_pid {
                proto::NamespaceMode::Pod
            } else {
                proto::NamespaceMode::Container
            },
        ),
        ipc: ns_mode(spec.host_ipc.unwrap_or(false), proto::NamespaceMode::Pod),
        ..Default::default()
    }
}

fn privileged(c: &k8s::Container) -> bool {
    c.security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false)
}

fn base_labels<C>(pod: &k8s::Pod, ctx: &NodeContext<C>) -> BTreeMap<String, String> {
    let m = &pod.metadata;
    BTreeMap::from([
        (POD_UID_LABEL.into(), pod::uid(pod).to_owned()),
        (POD_NAME_LABEL.into(), m.name.clone().unwrap_or_default()),
        (
            POD_NAMESPACE_LABEL.into(),
            m.namespace.clone().unwrap_or_default(),
        ),
        (NODE_LABEL.into(), ctx.node_name.clone()),
    ])
}

/// The pod's sandbox configuration.
pub fn sandbox_config<C: CgroupParent>(
    pod: &k8s::Pod,
    attempt: u32,
    ctx: &NodeContext<C>,
) -> proto::PodSandboxConfig {
    let m = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let host_network = pod::host_network(pod);
    let mut labels = m.labels.clone().unwrap_or_default();
    labels.extend(base_labels(pod, ctx));
    let mut annotations = m.annotations.clone().unwrap_or_default();
    annotations.insert(HOST_NETWORK_ANNOTATION.into(), host_network.to_string());
    annotations.insert(GRACE_ANNOTATION.into(), pod::grace_seconds(pod).to_string());
    // With the node's network the pod shares the node's UTS namespace too: the runtime
    // must not set a hostname (runc refuses), as the kubelet leaves it empty.
    let hostname = if host_network {
        String::new()
    } else {
        // Too long a name stops the sandbox before this is asked for
        // (`kernel_hostname`, at its creation).
        kernel_hostname(pod, ctx).unwrap_or_else(|_| hostname_and_domain(pod, ctx).0)
    };
    let port_mappings = pod::containers(pod)
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| proto::PortMapping {
            protocol: protocol(p.protocol.as_deref()),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let psc = spec.security_context.clone().unwrap_or_default();
    let any_privileged = pod::containers(pod)
        .iter()
        .chain(pod::init_containers(pod))
        .any(privileged);
    proto::PodSandboxConfig {
        metadata: Some(proto::PodSandboxMetadata {
            name: m.name.clone().unwrap_or_default(),
            uid: pod::uid(pod).to_owned(),
            namespace: m.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname,
        log_directory: log_directory(pod, ctx).to_string_lossy().into_owned(),
        dns_config: Some(dns_config(pod, ctx)),
        port_mappings,
        labels,
        annotations,
        linux: Some(proto::LinuxPodSandboxConfig {
            cgroup_parent: ctx
                .pod_cgroups
                .as_ref()
                .map(|c| c.cgroup_parent(pod))
                .unwrap_or_default(),
            security_context: Some(proto::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: psc.run_as_user.map(|value| proto::Int64Value { value }),
                run_as_group: psc.run_as_group.map(|value| proto::Int64Value { value }),
                supplemental_groups: supplemental_groups(&psc),
                privileged: any_privileged,
                ..Default::default()
            }),
            sysctls: psc
                .sysctls
                .iter()
                .flatten()
                .map(|s| (s.name.clone(), s.value.clone()))
                .collect(),
            ..Default::default()
        }),
    }
}

fn protocol(p: Option<&str>) -> i32 {
    match p {
        Some("UDP") => proto::Protocol::Udp as i32,
        Some("SCTP") => proto::Protocol::Sctp as i32,
        _ => proto::Protocol::Tcp as i32,
    }
}

/// A container's Linux resources as the runtime is given them: CPU shares and quota,
/// the memory limit and the OOM score, from its resources in `pod`'s spec; what the
/// node's cgroups add ([`NodeCgroups`]).
pub fn resources<C>(
    pod: &k8s::Pod,
    c: &k8s::Container,
    ctx: &NodeContext<C>,
) -> proto::LinuxContainerResources {
    let res = c.resources.clone().unwrap_or_default();
    let get = |list: &Option<
        BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
               name: &str,
               scale: i32| {
        list.as_ref()
            .and_then(|l| l.get(name))
            .and_then(|q| parse_quantity(&q.0, scale).ok())
    };
    let cpu_limit = get(&res.limits, "cpu", 3);
    // A request defaults to the limit.
    let cpu_request = get(&res.requests, "cpu", 3).or(cpu_limit);
    let memory_limit = get(&res.limits, "memory", 0);
    let memory_request = get(&res.requests, "memory", 0).or(memory_limit);
    use crate::cgroups::values::{QUOTA_PERIOD, milli_cpu_to_quota, milli_cpu_to_shares};
    let period = i64::try_from(QUOTA_PERIOD).unwrap_or(100_000);
    let shares = milli_cpu_to_shares(cpu_request.unwrap_or(0));
    let quota = cpu_limit
        .and_then(|m| milli_cpu_to_quota(m, QUOTA_PERIOD))
        .unwrap_or(0);
    let oom_score_adj = match qos_class(pod) {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        _ => {
            let request = memory_request.unwrap_or(0);
            let capacity = ctx.memory_bytes.max(1);
            let score = 1000 - (1000 * u128::from(request) / u128::from(capacity)) as i64;
            score.clamp(2, 999)
        }
    };
    let mut lcr = proto::LinuxContainerResources {
        cpu_period: if cpu_limit.is_some() { period } else { 0 },
        cpu_quota: quota,
        cpu_shares: i64::try_from(shares).unwrap_or(i64::MAX),
        memory_limit_in_bytes: memory_limit.map_or(0, |m| i64::try_from(m).unwrap_or(i64::MAX)),
        oom_score_adj,
        ..Default::default()
    };
    ctx.cgroups.apply(pod, c, &mut lcr);
    lcr
}

fn security_context(pod: &k8s::Pod, c: &k8s::Container) -> proto::LinuxContainerSecurityContext {
    let psc = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let sc = c.security_context.clone().unwrap_or_default();
    let privileged = sc.privileged.unwrap_or(false);
    let caps = sc.capabilities.clone().unwrap_or_default();
    proto::LinuxContainerSecurityContext {
        capabilities: Some(proto::Capability {
            add_capabilities: caps.add.unwrap_or_default(),
            drop_capabilities: caps.drop.unwrap_or_default(),
            ..Default::default()
        }),
        privileged,
        namespace_options: Some(namespace_options(pod)),
        run_as_user: sc
            .run_as_user
            .or(psc.run_as_user)
            .map(|value| proto::Int64Value { value }),
        run_as_group: sc
            .run_as_group
            .or(psc.run_as_group)
            .map(|value| proto::Int64Value { value }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: supplemental_groups(&psc),
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        masked_paths: if privileged {
            Vec::new()
        } else {
            MASKED_PATHS.map(str::to_owned).to_vec()
        },
        readonly_paths: if privileged {
            Vec::new()
        } else {
            READONLY_PATHS.map(str::to_owned).to_vec()
        },
        ..Default::default()
    }
}

/// The file a container's termination message is written to (mounted at its
/// `terminationMessagePath`).
pub fn termination_message_file<C>(
    pod: &k8s::Pod,
    ctx: &NodeContext<C>,
    container: &str,
    restart: i32,
) -> PathBuf {
    pod_dir(pod, ctx)
        .join("containers")
        .join(container)
        .join(format!("{restart}.termination-log"))
}

/// A container's configuration and what the node must hold before it starts.
/// `restart_count` is its number of earlier instances; `pod_ip` the sandbox's IP (for
/// `status.podIP` references); `refs` the ConfigMaps, Secrets and Services its
/// environment refers to.
pub fn container_config<C>(
    pod: &k8s::Pod,
    c: &k8s::Container,
    (init, restart_count): (bool, i32),
    pod_ip: &str,
    ctx: &NodeContext<C>,
    refs: &EnvData,
) -> Result<(proto::ContainerConfig, Vec<NodeFile>), ConfigError> {
    let env = environment(pod, c, pod_ip, ctx, refs)?;
    let known: BTreeMap<String, String> = env.iter().cloned().collect();
    let (mut mounts, mut files) = mounts::mounts(pod, c, ctx, &known, pod_ip)?;
    let message_path = c
        .termination_message_path
        .clone()
        .unwrap_or_else(|| "/dev/termination-log".into());
    let message_file = termination_message_file(pod, ctx, &c.name, restart_count);
    mounts.push(proto::Mount {
        container_path: message_path.clone(),
        host_path: message_file.to_string_lossy().into_owned(),
        ..Default::default()
    });
    files.push(NodeFile::TerminationLog(message_file));
    let mut labels = base_labels(pod, ctx);
    labels.insert(CONTAINER_NAME_LABEL.into(), c.name.clone());
    let annotations = container_annotations(pod, c, init, restart_count, message_path);
    let config = proto::ContainerConfig {
        metadata: Some(proto::ContainerMetadata {
            name: c.name.clone(),
            attempt: u32::try_from(restart_count).unwrap_or(0),
        }),
        image: Some(proto::ImageSpec {
            image: c.image.clone().unwrap_or_default(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: c
            .command
            .iter()
            .flatten()
            .map(|a| expand(a, &known))
            .collect(),
        args: c.args.iter().flatten().map(|a| expand(a, &known)).collect(),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: env
            .into_iter()
            .map(|(key, value)| proto::KeyValue { key, value })
            .collect(),
        mounts,
        labels,
        annotations,
        log_path: format!("{}/{restart_count}.log", c.name),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(proto::LinuxContainerConfig {
            resources: Some(resources(pod, c, ctx)),
            security_context: Some(security_context(pod, c)),
        }),
        ..Default::default()
    };
    Ok((config, files))
}

/// The container's annotations: its hash, restart count, termination message path and
/// policy, the pod's grace period, and whether it is an init container.
fn container_annotations(
    pod: &k8s::Pod,
    c: &k8s::Container,
    init: bool,
    restart_count: i32,
    message_path: String,
) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::from([
        (CONTAINER_HASH_ANNOTATION.into(), container_hash(c)),
        (RESTART_COUNT_ANNOTATION.into(), restart_count.to_string()),
        (TERMINATION_MESSAGE_PATH_ANNOTATION.into(), message_path),
        (
            TERMINATION_MESSAGE_POLICY_ANNOTATION.into(),
            c.termination_message_policy
                .clone()
                .unwrap_or_else(|| "File".into()),
        ),
        (GRACE_ANNOTATION.into(), pod::grace_seconds(pod).to_string()),
    ]);
    if init {
        annotations.insert(CONTAINER_TYPE_ANNOTATION.into(), "init".into());
    }
    annotations
}

/// The pod's supplemental groups, with its `fsGroup` after them: the group its volumes
/// belong to (the kubelet adds it to the sandbox's and every container's groups).
fn supplemental_groups(psc: &k8s::PodSecurityContext) -> Vec<i64> {
    let mut groups = psc.supplemental_groups.clone().unwrap_or_default();
    groups.extend(psc.fs_group.filter(|g| !groups.contains(g)));
    groups
}
