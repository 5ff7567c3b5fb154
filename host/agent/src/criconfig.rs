//! A pod and its containers as CRI configurations: `PodSandboxConfig` and
//! `ContainerConfig`, with the labels that let the agent find them again, environment
//! variables resolved, volumes mounted, resources as cgroup limits and the security
//! context carried over.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_cri::proto;
use wasmlet_plugin_host::convert::parse_quantity;

use crate::pod;
use crate::runtime::{
    CONTAINER_HASH_ANNOTATION, CONTAINER_NAME_LABEL, CONTAINER_TYPE_ANNOTATION, GRACE_ANNOTATION,
    HOST_NETWORK_ANNOTATION, NODE_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
    RESTART_COUNT_ANNOTATION, TERMINATION_MESSAGE_PATH_ANNOTATION,
    TERMINATION_MESSAGE_POLICY_ANNOTATION, container_hash,
};
use crate::status::qos_class;

/// The node facts pod configurations depend on.
#[derive(Debug, Clone, Default)]
pub struct NodeContext {
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
    /// The node's memory, for the OOM score of burstable pods.
    pub memory_bytes: u64,
    /// The node's allocatable resources: what a `resourceFieldRef` to a limit the
    /// container does not set reads, as with the kubelet.
    pub allocatable: BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    /// Pod-level cgroups (`None`: pods go where the runtime puts them).
    pub pod_cgroups: Option<crate::cgroups::PodCgroups>,
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
const MASKED_PATHS: [&str; 11] = [
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
const READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Parses `/etc/resolv.conf` text.
pub fn parse_resolv_conf(text: &str) -> proto::DnsConfig {
    let mut dns = proto::DnsConfig::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => dns.servers.extend(words.next().map(str::to_owned)),
            Some("search" | "domain") => {
                dns.searches = words.map(str::to_owned).collect();
            }
            Some("options") => dns.options.extend(words.map(str::to_owned)),
            _ => {}
        }
    }
    dns
}

/// The pod's log directory.
pub fn log_directory(pod: &k8s::Pod, ctx: &NodeContext) -> PathBuf {
    let m = &pod.metadata;
    ctx.pod_logs_dir.join(format!(
        "{}_{}_{}",
        m.namespace.as_deref().unwrap_or("default"),
        m.name.as_deref().unwrap_or(""),
        pod::uid(pod)
    ))
}

/// The directory holding the pod's volumes and files.
pub fn pod_dir(pod: &k8s::Pod, ctx: &NodeContext) -> PathBuf {
    ctx.pods_dir.join(pod::uid(pod))
}

fn dns_config(pod: &k8s::Pod, ctx: &NodeContext) -> proto::DnsConfig {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    // Without a cluster DNS, ClusterFirst falls back to the node's resolver, as the
    // kubelet does; `None` starts from nothing.
    let mut dns = if policy == "None" {
        proto::DnsConfig::default()
    } else {
        ctx.dns.clone()
    };
    if let Some(c) = spec.and_then(|s| s.dns_config.as_ref()) {
        dns.servers.extend(c.nameservers.iter().flatten().cloned());
        dns.searches.extend(c.searches.iter().flatten().cloned());
        for o in c.options.iter().flatten() {
            let Some(name) = o.name.as_deref() else {
                continue;
            };
            dns.options.retain(|x| x.split(':').next() != Some(name));
            dns.options.push(match o.value.as_deref() {
                Some(v) => format!("{name}:{v}"),
                None => name.to_owned(),
            });
        }
    }
    dns
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

fn base_labels(pod: &k8s::Pod, ctx: &NodeContext) -> BTreeMap<String, String> {
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
pub fn sandbox_config(pod: &k8s::Pod, attempt: u32, ctx: &NodeContext) -> proto::PodSandboxConfig {
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
        let mut h = spec
            .hostname
            .clone()
            .unwrap_or_else(|| m.name.clone().unwrap_or_default());
        h.truncate(63);
        h.trim_end_matches(['-', '.']).to_owned()
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
        dns_config: (!host_network).then(|| dns_config(pod, ctx)),
        port_mappings,
        labels,
        annotations,
        linux: Some(proto::LinuxPodSandboxConfig {
            cgroup_parent: ctx
                .pod_cgroups
                .as_ref()
                .map(|c| c.cgroup_parent(pod::uid(pod)))
                .unwrap_or_default(),
            security_context: Some(proto::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: psc.run_as_user.map(|value| proto::Int64Value { value }),
                run_as_group: psc.run_as_group.map(|value| proto::Int64Value { value }),
                supplemental_groups: psc.supplemental_groups.clone().unwrap_or_default(),
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

/// Expands `$(VAR)` references from `env` the Kubernetes way: `$$` escapes, unknown
/// references stay as written.
pub fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let env: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    wasmlet_plugin_host::convert::expand_command(text, &env)
}

pub(crate) fn field_ref(
    pod: &k8s::Pod,
    path: &str,
    pod_ip: &str,
    ctx: &NodeContext,
) -> Option<String> {
    let m = &pod.metadata;
    let map_key = |prefix: &str, map: &Option<BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.as_ref()?.get(key).cloned().unwrap_or_default())
    };
    Some(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => pod::uid(pod).to_owned(),
        "spec.nodeName" => ctx.node_name.clone(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => ctx.host_ip.clone(),
        "status.podIP" | "status.podIPs" => {
            if pod::host_network(pod) {
                ctx.host_ip.clone()
            } else {
                pod_ip.to_owned()
            }
        }
        _ => {
            return map_key("metadata.labels['", &m.labels)
                .or_else(|| map_key("metadata.annotations['", &m.annotations));
        }
    })
}

pub(crate) fn resource_ref(
    c: &k8s::Container,
    r: &k8s::ResourceFieldSelector,
    field: &str,
    ctx: &NodeContext,
) -> Result<String, ConfigError> {
    let res = c.resources.clone().unwrap_or_default();
    let (which, name) = r
        .resource
        .split_once('.')
        .ok_or_else(|| ConfigError::new(format!("{field}: unsupported resource {}", r.resource)))?;
    let list = if which == "limits" {
        res.limits
    } else {
        res.requests
    };
    // A limit the container does not set is the node's allocatable amount.
    let q = list.and_then(|l| l.get(name).cloned()).or_else(|| {
        (which == "limits")
            .then(|| ctx.allocatable.get(name).cloned())
            .flatten()
    });
    let (scale, divisor_default) = if name == "cpu" { (3, 1000) } else { (0, 1) };
    let value = q
        .and_then(|q| parse_quantity(&q.0, scale).ok())
        .unwrap_or(0);
    let divisor = match &r.divisor {
        Some(d) => parse_quantity(&d.0, scale)
            .map_err(|e| ConfigError::new(format!("{field}.divisor: {e}")))?
            .max(1),
        None => divisor_default,
    };
    Ok(value.div_ceil(divisor).to_string())
}

/// ConfigMaps and Secrets a pod's environment refers to, read before its containers
/// are made (`None`: it does not exist). Values are text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvData {
    /// ConfigMaps by name.
    pub config_maps: BTreeMap<String, Option<BTreeMap<String, String>>>,
    /// Secrets by name.
    pub secrets: BTreeMap<String, Option<BTreeMap<String, String>>>,
}

impl EnvData {
    /// The ConfigMaps (`false`) and Secrets (`true`) `c`'s environment names.
    pub fn wanted(c: &k8s::Container) -> Vec<(bool, String)> {
        let mut out = Vec::new();
        for from in c.env_from.iter().flatten() {
            if let Some(r) = &from.config_map_ref {
                out.push((false, r.name.clone()));
            }
            if let Some(r) = &from.secret_ref {
                out.push((true, r.name.clone()));
            }
        }
        for e in c.env.iter().flatten() {
            if let Some(from) = &e.value_from {
                if let Some(r) = &from.config_map_key_ref {
                    out.push((false, r.name.clone()));
                }
                if let Some(r) = &from.secret_key_ref {
                    out.push((true, r.name.clone()));
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The data of a ConfigMap (`secret` false) or Secret, or the kubelet's error when
    /// it is missing.
    fn get(&self, secret: bool, name: &str) -> Result<&BTreeMap<String, String>, ConfigError> {
        let map = if secret {
            &self.secrets
        } else {
            &self.config_maps
        };
        map.get(name).and_then(Option::as_ref).ok_or_else(|| {
            ConfigError::new(format!(
                "{} \"{name}\" not found",
                if secret { "secret" } else { "configmap" }
            ))
        })
    }
}

/// The container's environment, in order, with references resolved.
fn environment(
    pod: &k8s::Pod,
    c: &k8s::Container,
    pod_ip: &str,
    ctx: &NodeContext,
    refs: &EnvData,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut known: BTreeMap<String, String> = BTreeMap::new();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    for from in c.env_from.iter().flatten() {
        let (secret, name, optional) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), _) => (false, &r.name, r.optional.unwrap_or(false)),
            (None, Some(r)) => (true, &r.name, r.optional.unwrap_or(false)),
            (None, None) => continue,
        };
        let data = match refs.get(secret, name) {
            Ok(d) => d,
            Err(_) if optional => continue,
            Err(e) => return Err(e),
        };
        let prefix = from.prefix.as_deref().unwrap_or("");
        for (k, v) in data {
            let key = format!("{prefix}{k}");
            known.insert(key.clone(), v.clone());
            env.retain(|(n, _)| n != &key);
            env.push((key, v.clone()));
        }
    }
    for (i, e) in c.env.iter().flatten().enumerate() {
        let field = format!("env[{i}] ({})", e.name);
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => expand(v, &known),
            (None, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    field_ref(pod, &f.field_path, pod_ip, ctx).ok_or_else(|| {
                        ConfigError::new(format!("{field}: unsupported fieldRef {}", f.field_path))
                    })?
                } else if let Some(r) = &from.resource_field_ref {
                    resource_ref(c, r, &field, ctx)?
                } else if let Some((secret, name, key, optional)) = from
                    .config_map_key_ref
                    .as_ref()
                    .map(|r| (false, &r.name, &r.key, r.optional.unwrap_or(false)))
                    .or_else(|| {
                        from.secret_key_ref
                            .as_ref()
                            .map(|r| (true, &r.name, &r.key, r.optional.unwrap_or(false)))
                    })
                {
                    match refs.get(secret, name).map(|d| d.get(key).cloned()) {
                        Ok(Some(v)) => v,
                        _ if optional => continue,
                        Err(e) => return Err(e),
                        // The kubelet's words.
                        Ok(None) => {
                            return Err(ConfigError::new(format!(
                                "couldn't find key {key} in {} {namespace}/{name}",
                                if secret { "Secret" } else { "ConfigMap" }
                            )));
                        }
                    }
                } else {
                    String::new()
                }
            }
            (None, None) => String::new(),
        };
        known.insert(e.name.clone(), value.clone());
        env.retain(|(k, _)| k != &e.name);
        env.push((e.name.clone(), value));
    }
    Ok(env)
}

fn resources(
    pod: &k8s::Pod,
    c: &k8s::Container,
    ctx: &NodeContext,
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
    let period = 100_000i64;
    let shares = cpu_request.map_or(2, |m| (m * 1024 / 1000).max(2));
    let quota = cpu_limit.map_or(0, |m| {
        (i64::try_from(m).unwrap_or(i64::MAX) * period / 1000).max(1000)
    });
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
    proto::LinuxContainerResources {
        cpu_period: if cpu_limit.is_some() { period } else { 0 },
        cpu_quota: quota,
        cpu_shares: i64::try_from(shares).unwrap_or(i64::MAX),
        memory_limit_in_bytes: memory_limit.map_or(0, |m| i64::try_from(m).unwrap_or(i64::MAX)),
        oom_score_adj,
        ..Default::default()
    }
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
        supplemental_groups: psc.supplemental_groups.unwrap_or_default(),
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

/// Where an emptyDir volume lives on the node.
pub fn empty_dir_path(pod: &k8s::Pod, ctx: &NodeContext, volume: &str) -> PathBuf {
    pod_dir(pod, ctx)
        .join("volumes/kubernetes.io~empty-dir")
        .join(volume)
}

/// The host side of each of the container's mounts, creating what must exist
/// (emptyDir directories, hostPath `DirectoryOrCreate`).
fn mounts(
    pod: &k8s::Pod,
    c: &k8s::Container,
    ctx: &NodeContext,
) -> Result<Vec<proto::Mount>, ConfigError> {
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let mut out = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else {
            return Err(ConfigError::new(format!(
                "volume \"{}\" is not defined in the pod",
                m.name
            )));
        };
        let host: PathBuf = if v.empty_dir.is_some() {
            let dir = empty_dir_path(pod, ctx, &v.name);
            std::fs::create_dir_all(&dir).map_err(|e| {
                ConfigError::new(format!("volume \"{}\": {}: {e}", v.name, dir.display()))
            })?;
            dir
        } else if let Some(hp) = &v.host_path {
            let path = PathBuf::from(&hp.path);
            match hp.type_.as_deref().unwrap_or("") {
                "DirectoryOrCreate" => std::fs::create_dir_all(&path).map_err(|e| {
                    ConfigError::new(format!("volume \"{}\": {}: {e}", v.name, path.display()))
                })?,
                "FileOrCreate" if !path.exists() => {
                    if let Some(parent) = path.parent() {
                        let _ = std::fs::create_dir_all(parent);
                    }
                    std::fs::write(&path, b"").map_err(|e| {
                        ConfigError::new(format!("volume \"{}\": {}: {e}", v.name, path.display()))
                    })?;
                }
                "Directory" if !path.is_dir() => {
                    return Err(ConfigError::new(format!(
                        "hostPath type check failed: {} is not a directory",
                        path.display()
                    )));
                }
                "File" if !path.is_file() => {
                    return Err(ConfigError::new(format!(
                        "hostPath type check failed: {} is not a file",
                        path.display()
                    )));
                }
                _ => {}
            }
            path
        } else if let Some(dir) = crate::volumes::path(pod, ctx, v) {
            // configMap, secret, downwardAPI, projected: written before the containers
            // start (crate::volumes).
            dir
        } else {
            return Err(ConfigError::new(format!(
                "volume \"{}\": only emptyDir, hostPath, configMap, secret, downwardAPI and projected volumes are supported on this node",
                v.name
            )));
        };
        let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) if sub.split('/').any(|p| p == "..") => {
                return Err(ConfigError::new(format!(
                    "volumeMounts \"{}\": subPath {sub} must not contain '..'",
                    m.name
                )));
            }
            Some(sub) => {
                let p = host.join(sub);
                let _ = std::fs::create_dir_all(&p);
                p
            }
            None => host,
        };
        out.push(proto::Mount {
            container_path: m.mount_path.clone(),
            host_path: host.to_string_lossy().into_owned(),
            readonly: m.read_only.unwrap_or(false),
            propagation: match m.mount_propagation.as_deref() {
                Some("HostToContainer") => proto::MountPropagation::PropagationHostToContainer,
                Some("Bidirectional") => proto::MountPropagation::PropagationBidirectional,
                _ => proto::MountPropagation::PropagationPrivate,
            } as i32,
            ..Default::default()
        });
    }
    Ok(out)
}

/// The file a container's termination message is written to (mounted at its
/// `terminationMessagePath`).
pub fn termination_message_file(
    pod: &k8s::Pod,
    ctx: &NodeContext,
    container: &str,
    restart: i32,
) -> PathBuf {
    pod_dir(pod, ctx)
        .join("containers")
        .join(container)
        .join(format!("{restart}.termination-log"))
}

/// A container's configuration. `restart_count` is its number of earlier instances;
/// `pod_ip` the sandbox's IP (for `status.podIP` references).
pub fn container_config(
    pod: &k8s::Pod,
    c: &k8s::Container,
    init: bool,
    restart_count: i32,
    pod_ip: &str,
    ctx: &NodeContext,
) -> Result<proto::ContainerConfig, ConfigError> {
    container_config_with(
        pod,
        c,
        init,
        restart_count,
        pod_ip,
        ctx,
        &EnvData::default(),
    )
}

/// [`container_config`] with the ConfigMaps and Secrets its environment refers to.
pub fn container_config_with(
    pod: &k8s::Pod,
    c: &k8s::Container,
    init: bool,
    restart_count: i32,
    pod_ip: &str,
    ctx: &NodeContext,
    refs: &EnvData,
) -> Result<proto::ContainerConfig, ConfigError> {
    let env = environment(pod, c, pod_ip, ctx, refs)?;
    let known: BTreeMap<String, String> = env.iter().cloned().collect();
    let mut mounts = mounts(pod, c, ctx).map_err(|e| ConfigError { volume: true, ..e })?;
    let message_path = c
        .termination_message_path
        .clone()
        .unwrap_or_else(|| "/dev/termination-log".into());
    let message_file = termination_message_file(pod, ctx, &c.name, restart_count);
    if let Some(dir) = message_file.parent() {
        // Writable by whatever user the container runs as, as the kubelet makes it.
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&message_file, b""))
            .and_then(|()| {
                std::fs::set_permissions(&message_file, std::fs::Permissions::from_mode(0o666))
            })
            .map_err(|e| ConfigError::new(format!("{}: {e}", message_file.display())))?;
    }
    mounts.push(proto::Mount {
        container_path: message_path.clone(),
        host_path: message_file.to_string_lossy().into_owned(),
        ..Default::default()
    });
    let mut labels = base_labels(pod, ctx);
    labels.insert(CONTAINER_NAME_LABEL.into(), c.name.clone());
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
    Ok(proto::ContainerConfig {
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
    })
}

/// Reads the node's memory from `/proc/meminfo` (0 if it cannot).
pub fn node_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Reads the node's resolver configuration (empty if there is none).
pub fn node_dns(path: &Path) -> proto::DnsConfig {
    std::fs::read_to_string(path)
        .map(|t| parse_resolv_conf(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn ctx(dir: &Path) -> NodeContext {
        NodeContext {
            node_name: "node-a".into(),
            hostname: "node-a.local".into(),
            host_ip: "192.168.1.2".into(),
            pod_logs_dir: dir.join("logs"),
            pods_dir: dir.join("pods"),
            dns: parse_resolv_conf("nameserver 1.1.1.1\nsearch lan\noptions ndots:2\n"),
            memory_bytes: 8 << 30,
            allocatable: [
                ("cpu".to_string(), Quantity("3500m".into())),
                ("memory".to_string(), Quantity("8388608Ki".into())),
            ]
            .into(),
            pod_cgroups: None,
        }
    }

    fn tempdir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("wasmlet-criconfig-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("tempdir");
        d
    }

    fn pod(json: &str) -> k8s::Pod {
        let mut p: k8s::Pod = serde_json::from_str(json).expect("pod");
        crate::pod::make_static(&mut p, "file", "p.yaml", "node-a");
        p
    }

    #[test]
    fn expansion_follows_kubernetes() {
        let env = BTreeMap::from([("A".to_string(), "x".to_string())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &env), "x-$(B)-$(A)-$");
        assert_eq!(expand("no refs", &env), "no refs");
        assert_eq!(expand("$(A", &env), "$(A");
    }

    #[test]
    fn sandbox_config_carries_identity_network_and_ports() {
        let dir = tempdir("sandbox");
        let p = pod(
            r#"{"metadata":{"name":"web","labels":{"app":"web"}},"spec":{
              "containers":[{"name":"c","image":"i","ports":[{"containerPort":80,"hostPort":8080}],
              "securityContext":{"privileged":true}}],
              "dnsConfig":{"nameservers":["9.9.9.9"],"options":[{"name":"ndots","value":"5"}]}}}"#,
        );
        let c = sandbox_config(&p, 2, &ctx(&dir));
        let m = c.metadata.as_ref().expect("metadata");
        assert_eq!((m.name.as_str(), m.attempt), ("web-node-a", 2));
        assert_eq!(c.labels["app"], "web");
        assert_eq!(c.labels[NODE_LABEL], "node-a");
        assert_eq!(c.labels[POD_UID_LABEL], crate::pod::uid(&p));
        assert_eq!(c.hostname, "web-node-a");
        assert_eq!(c.port_mappings[0].host_port, 8080);
        let dns = c.dns_config.as_ref().expect("dns");
        assert_eq!(dns.servers, ["1.1.1.1", "9.9.9.9"]);
        assert_eq!(dns.options, ["ndots:5"]);
        let sc = c
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .expect("security context");
        assert!(
            sc.privileged,
            "a privileged container makes the sandbox privileged"
        );
        assert!(
            c.log_directory
                .ends_with(&format!("default_web-node-a_{}", crate::pod::uid(&p)))
        );

        let host = pod(
            r#"{"metadata":{"name":"h"},"spec":{"hostNetwork":true,"containers":[{"name":"c","image":"i"}]}}"#,
        );
        let c = sandbox_config(&host, 0, &ctx(&dir));
        assert_eq!(c.hostname, "", "the node's own UTS namespace");
        assert_eq!(c.annotations[HOST_NETWORK_ANNOTATION], "true");
        let ns = c
            .linux
            .and_then(|l| l.security_context)
            .and_then(|s| s.namespace_options)
            .expect("namespaces");
        assert_eq!(ns.network, proto::NamespaceMode::Node as i32);
    }

    #[test]
    fn unset_limits_read_as_the_nodes_allocatable() {
        let dir = tempdir("allocatable");
        let p = pod(
            r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"c","image":"busybox:1",
                "env":[{"name":"CPU","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu"}}},
                       {"name":"CPU_M","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"1m"}}},
                       {"name":"MEM","valueFrom":{"resourceFieldRef":{"resource":"limits.memory","divisor":"1Mi"}}},
                       {"name":"REQ","valueFrom":{"resourceFieldRef":{"resource":"requests.cpu"}}}]}]}}"#,
        );
        let c = &crate::pod::containers(&p)[0];
        let cfg = container_config(&p, c, false, 0, "", &ctx(&dir)).expect("config");
        let env: BTreeMap<_, _> = cfg
            .envs
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(env["CPU"], "4", "3500m allocatable, rounded up to cores");
        assert_eq!(env["CPU_M"], "3500");
        assert_eq!(env["MEM"], "8192");
        assert_eq!(env["REQ"], "0", "an unset request stays 0");
    }

    #[test]
    fn container_config_resolves_env_mounts_and_resources() {
        let dir = tempdir("container");
        let p = pod(
            r#"{"metadata":{"name":"web","labels":{"tier":"front"}},"spec":{
              "volumes":[{"name":"data","emptyDir":{}},{"name":"host","hostPath":{"path":"HOSTDIR","type":"DirectoryOrCreate"}}],
              "containers":[{"name":"c","image":"busybox:1","command":["sh","-c"],"args":["echo $(GREETING) $(POD)"],
                "env":[{"name":"NAME","value":"world"},{"name":"GREETING","value":"hello $(NAME)"},
                       {"name":"POD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}},
                       {"name":"IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}},
                       {"name":"TIER","valueFrom":{"fieldRef":{"fieldPath":"metadata.labels['tier']"}}},
                       {"name":"CPU","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu"}}}],
                "volumeMounts":[{"name":"data","mountPath":"/data"},{"name":"host","mountPath":"/host","readOnly":true}],
                "resources":{"limits":{"cpu":"500m","memory":"64Mi"}}}]}}"#
                .replace("HOSTDIR", &dir.join("hp").to_string_lossy())
                .as_str(),
        );
        let c = &crate::pod::containers(&p)[0];
        let cfg = container_config(&p, c, false, 3, "10.88.0.9", &ctx(&dir)).expect("config");
        let env: BTreeMap<_, _> = cfg
            .envs
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(env["GREETING"], "hello world");
        assert_eq!(env["POD"], "web-node-a");
        assert_eq!(env["IP"], "10.88.0.9");
        assert_eq!(env["TIER"], "front");
        assert_eq!(env["CPU"], "1", "cpu rounds up to whole cores");
        assert_eq!(cfg.args, ["echo hello world web-node-a"]);
        assert_eq!(cfg.metadata.as_ref().map(|m| m.attempt), Some(3));
        assert_eq!(cfg.log_path, "c/3.log");
        assert_eq!(cfg.annotations[RESTART_COUNT_ANNOTATION], "3");
        assert_eq!(cfg.labels[CONTAINER_NAME_LABEL], "c");
        assert!(dir.join("hp").is_dir(), "DirectoryOrCreate");
        assert!(empty_dir_path(&p, &ctx(&dir), "data").is_dir());
        assert_eq!(cfg.mounts.len(), 3, "two volumes and the termination log");
        assert!(cfg.mounts[1].readonly);
        assert_eq!(cfg.mounts[2].container_path, "/dev/termination-log");
        let r = cfg
            .linux
            .as_ref()
            .and_then(|l| l.resources.as_ref())
            .expect("resources");
        assert_eq!(
            (r.cpu_period, r.cpu_quota, r.cpu_shares),
            (100_000, 50_000, 512)
        );
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        assert_eq!(
            r.oom_score_adj, -997,
            "limits alone make the pod Guaranteed"
        );
        let sc = cfg
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .expect("security");
        assert_eq!(sc.masked_paths.len(), MASKED_PATHS.len());
    }

    #[test]
    fn environment_from_config_maps_and_secrets() {
        let dir = tempdir("envrefs");
        let p = pod(
            r#"{"metadata":{"name":"w","namespace":"shop"},"spec":{"containers":[{"name":"c","image":"i",
              "envFrom":[{"configMapRef":{"name":"app"},"prefix":"APP_"}],
              "env":[{"name":"PASSWORD","valueFrom":{"secretKeyRef":{"name":"db","key":"password"}}},
                     {"name":"MODE","valueFrom":{"configMapKeyRef":{"name":"app","key":"mode"}}},
                     {"name":"OPT","valueFrom":{"configMapKeyRef":{"name":"app","key":"nope","optional":true}}},
                     {"name":"URL","value":"http://$(APP_host)/"}]}]}}"#,
        );
        let c = &crate::pod::containers(&p)[0];
        assert_eq!(
            EnvData::wanted(c),
            [(false, "app".to_string()), (true, "db".to_string())]
        );
        let mut refs = EnvData::default();
        refs.config_maps.insert(
            "app".into(),
            Some(BTreeMap::from([
                ("mode".to_string(), "fast".to_string()),
                ("host".to_string(), "db.local".to_string()),
            ])),
        );
        refs.secrets.insert(
            "db".into(),
            Some(BTreeMap::from([(
                "password".to_string(),
                "s3cret".to_string(),
            )])),
        );
        let cfg = container_config_with(&p, c, false, 0, "", &ctx(&dir), &refs).expect("config");
        let env: BTreeMap<String, String> =
            cfg.envs.into_iter().map(|e| (e.key, e.value)).collect();
        assert_eq!(env["APP_mode"], "fast");
        assert_eq!(env["PASSWORD"], "s3cret");
        assert_eq!(env["MODE"], "fast");
        assert_eq!(env["URL"], "http://db.local/");
        assert!(!env.contains_key("OPT"));
        // A key that is not there, in the kubelet's words.
        refs.secrets.insert("db".into(), Some(BTreeMap::new()));
        let err =
            container_config_with(&p, c, false, 0, "", &ctx(&dir), &refs).expect_err("no key");
        assert_eq!(
            err.to_string(),
            "couldn't find key password in Secret shop/db"
        );
        refs.secrets.insert("db".into(), None);
        let err =
            container_config_with(&p, c, false, 0, "", &ctx(&dir), &refs).expect_err("no secret");
        assert_eq!(err.to_string(), "secret \"db\" not found");
    }

    #[test]
    fn missing_config_maps_and_unsupported_volumes_are_config_errors() {
        let dir = tempdir("errors");
        let p = pod(
            r#"{"metadata":{"name":"w"},"spec":{"containers":[{"name":"c","image":"i",
              "env":[{"name":"X","valueFrom":{"configMapKeyRef":{"name":"cfg","key":"x"}}}]}]}}"#,
        );
        let err = container_config(&p, &crate::pod::containers(&p)[0], false, 0, "", &ctx(&dir))
            .expect_err("no configmaps here");
        assert_eq!(err.to_string(), "configmap \"cfg\" not found");
        let p = pod(
            r#"{"metadata":{"name":"w"},"spec":{"volumes":[{"name":"s","persistentVolumeClaim":{"claimName":"x"}}],
              "containers":[{"name":"c","image":"i","volumeMounts":[{"name":"s","mountPath":"/s"}]}]}}"#,
        );
        let err = container_config(&p, &crate::pod::containers(&p)[0], false, 0, "", &ctx(&dir))
            .expect_err("claim volume");
        assert!(err.to_string().contains("volume \"s\""), "{err}");
    }
}
