//! wasmlet's configuration file: the kubelet's KubeletConfiguration field names where the
//! meaning is the same, wasmlet's own fields beside them, and the `plugins:` section.
//!
//! ```yaml
//! apiVersion: kubelet.config.k8s.io/v1beta1   # optional; a KubeletConfiguration is accepted as is
//! kind: KubeletConfiguration
//! nodeName: node-a                      # default: the hostname
//! nodeIP: 10.0.0.5                      # default: the address of the default route
//! containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
//! staticPodPath: /etc/kubernetes/manifests
//! fileCheckFrequency: 20s
//! syncFrequency: 1m
//! maxPods: 110
//! maxParallelStartCalls: 8              # wasmlet's: sandbox/container starts at once; default 4 per CPU, 0: no limit
//! healthzBindAddress: 127.0.0.1
//! healthzPort: 10248
//! address: 127.0.0.1                    # where the read-only port listens
//! readOnlyPort: 10255                   # GET /pods, /metrics, /plugins, /node; 0 turns it off
//! rootDir: /var/lib/wasmlet
//! podLogsDir: /var/lib/wasmlet/pod-logs
//! resolvConf: /etc/resolv.conf
//! clusterDNS: [10.96.0.10]              # ClusterFirst pods resolve through these
//! clusterDomain: cluster.local          # their search path: <ns>.svc.<domain> svc.<domain> <domain>
//! allowedUnsafeSysctls: [kernel.msg*]   # beyond the safe set (the shipped sysctls plugin)
//! podPidsLimit: 1024                    # pids.max of each pod's cgroup; -1: no limit
//! cgroupsPerQOS: true                   # pods in cgroups of their own, <cgroupRoot>/wasmlet/pod<uid>
//! cgroupRoot: /
//! cgroupDriver: cgroupfs                # systemd: no pod cgroups (warned)
//! # Cluster mode (with a kubeconfig):
//! kubeconfig: /etc/wasmlet/kubeconfig
//! nodeLabels: {pool: wasm}              # wasmlet's field (the kubelet's --node-labels)
//! registerWithTaints: [{key: dedicated, value: wasm, effect: NoSchedule}]
//! kubeReserved: {cpu: 100m, memory: 256Mi}      # allocatable = capacity - kube - system
//! systemReserved: {memory: 512Mi, ephemeral-storage: 1Gi}
//! nodeStatusUpdateFrequency: 10s
//! nodeStatusReportFrequency: 5m
//! nodeLeaseDurationSeconds: 40          # renewed every quarter of it
//! kubeAPIQPS: 50                        # status patches, mirror pods, deletes
//! kubeAPIBurst: 100
//! eventRecordQPS: 50
//! eventBurst: 100
//! containerLogMaxSize: 10Mi             # a running container's log is rotated past it
//! containerLogMaxFiles: 5               # files kept per container, the live one included
//! containerLogMaxWorkers: 1             # containers rotated at once
//! containerLogMonitorInterval: 10s      # how often logs are looked at (3s or more)
//! evictionHard: {memory.available: 100Mi, nodefs.available: 10%}   # given: replaces all defaults
//! evictionSoft: {memory.available: 500Mi}
//! evictionSoftGracePeriod: {memory.available: 1m30s}
//! evictionMinimumReclaim: {memory.available: 50Mi}
//! evictionPressureTransitionPeriod: 5m  # a pressure condition holds this long after its signal
//! evictionMaxPodGracePeriod: 0          # soft evictions: most grace a pod gets (0: its own)
//! imageGCHighThresholdPercent: 85       # unused images removed above this image-disk use…
//! imageGCLowThresholdPercent: 80        # …down to this
//! imageMinimumGCAge: 2m
//! housekeepingInterval: 10s             # usage sampled, eviction decided (the kubelet's flag)
//! plugins: { ... }                      # see wasmlet_plugin_host::config
//! clusterPlugins:                       # WasmletPlugins, in cluster mode (see wasmlet_fleet)
//!   enabled: true
//!   namespace: wasmlet-system           # pull secrets and ConfigMaps are read here
//!   grants: {network: [pod], exec: false}   # what they may be given; nothing by default
//! ```
//!
//! KubeletConfiguration fields wasmlet does not implement are warned about by name and
//! ignored; any other unknown field, and every invalid value, is an error naming the
//! file and the field.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use wasmlet_agent::agent::ClusterDns;
use wasmlet_agent::node::Reserved;
use wasmlet_cluster::Limits;
use wasmlet_cluster::node::Timing;
use wasmlet_plugin_host::config::PluginsConfig;
use wasmlet_plugin_host::convert::{parse_duration, parse_quantity};

mod configz;
mod labels;
mod logs;
mod pods;
mod resources;
mod server;

pub use labels::check_node_labels;
use pods::{cluster_dns, unsafe_sysctls};
pub use resources::Resources;
pub use server::ServerConfig;

/// KubeletConfiguration fields wasmlet reads but does not act on: a warning each.
const NOT_IMPLEMENTED: &[&str] = &[
    "contentType",
    "cpuCFSQuota",
    "cpuManagerPolicy",
    "enableControllerAttachDetach",
    "enableDebuggingHandlers",
    "enforceNodeAllocatable",
    "failSwapOn",
    "featureGates",
    "hairpinMode",
    "imageServiceEndpoint",
    "localStorageCapacityIsolation",
    "logging",
    "makeIPTablesUtilChains",
    "maxOpenFiles",
    "maxParallelImagePulls",
    "memoryManagerPolicy",
    "memorySwap",
    "podCIDR",
    "protectKernelDefaults",
    "providerID",
    "registryBurst",
    "registryPullQPS",
    "rotateCertificates",
    "runtimeRequestTimeout",
    "seccompDefault",
    "serializeImagePulls",
    "serverTLSBootstrap",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "staticPodURL",
    "staticPodURLHeader",
    "streamingConnectionIdleTimeout",
    "topologyManagerPolicy",
    "volumeStatsAggPeriod",
];

/// The file as written (after the unimplemented fields are taken out).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    api_version: Option<String>,
    kind: Option<String>,
    node_name: Option<String>,
    #[serde(rename = "nodeIP")]
    node_ip: Option<String>,
    kubeconfig: Option<PathBuf>,
    container_runtime_endpoint: Option<String>,
    static_pod_path: Option<PathBuf>,
    file_check_frequency: Option<String>,
    sync_frequency: Option<String>,
    max_pods: Option<i64>,
    max_parallel_start_calls: Option<i64>,
    healthz_bind_address: Option<String>,
    healthz_port: Option<i64>,
    address: Option<String>,
    read_only_port: Option<i64>,
    enable_server: Option<bool>,
    port: Option<i64>,
    tls_cert_file: Option<PathBuf>,
    tls_private_key_file: Option<PathBuf>,
    tls_min_version: Option<String>,
    tls_cipher_suites: Option<Vec<String>>,
    authentication: Option<server::AuthnFile>,
    authorization: Option<server::AuthzFile>,
    root_dir: Option<PathBuf>,
    pod_logs_dir: Option<PathBuf>,
    resolv_conf: Option<PathBuf>,
    #[serde(rename = "clusterDNS")]
    cluster_dns: Option<Vec<String>>,
    allowed_unsafe_sysctls: Option<Vec<String>>,
    cluster_domain: Option<String>,
    pod_pids_limit: Option<i64>,
    #[serde(rename = "cgroupsPerQOS")]
    cgroups_per_qos: Option<bool>,
    cgroup_root: Option<String>,
    cgroup_driver: Option<String>,
    node_labels: Option<BTreeMap<String, String>>,
    register_with_taints: Option<Vec<k8s_openapi::api::core::v1::Taint>>,
    kube_reserved: Option<BTreeMap<String, serde_yaml_ng::Value>>,
    system_reserved: Option<BTreeMap<String, serde_yaml_ng::Value>>,
    node_status_update_frequency: Option<String>,
    node_status_report_frequency: Option<String>,
    node_lease_duration_seconds: Option<i64>,
    #[serde(rename = "kubeAPIQPS")]
    kube_api_qps: Option<f64>,
    #[serde(rename = "kubeAPIBurst")]
    kube_api_burst: Option<i64>,
    #[serde(rename = "eventRecordQPS")]
    event_record_qps: Option<f64>,
    event_burst: Option<i64>,
    container_log_max_size: Option<serde_yaml_ng::Value>,
    container_log_max_files: Option<i64>,
    container_log_max_workers: Option<i64>,
    container_log_monitor_interval: Option<String>,
    eviction_hard: Option<BTreeMap<String, String>>,
    eviction_soft: Option<BTreeMap<String, String>>,
    eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    eviction_minimum_reclaim: Option<BTreeMap<String, String>>,
    eviction_pressure_transition_period: Option<String>,
    eviction_max_pod_grace_period: Option<i64>,
    #[serde(rename = "imageGCHighThresholdPercent")]
    image_gc_high_threshold_percent: Option<i64>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    image_gc_low_threshold_percent: Option<i64>,
    #[serde(rename = "imageMinimumGCAge")]
    image_minimum_gc_age: Option<String>,
    housekeeping_interval: Option<String>,
    node_status_max_images: Option<i64>,
    plugins: Option<PluginsConfig>,
    cluster_plugins: Option<wasmlet_fleet::FleetConfig>,
}

/// The agent's configuration, validated, defaults filled in.
#[derive(Debug, Clone)]
pub struct Config {
    /// `nodeName`.
    pub node_name: Option<String>,
    /// `nodeIP`.
    pub node_ip: Option<String>,
    /// `kubeconfig` (cluster mode; not used standalone).
    pub kubeconfig: Option<PathBuf>,
    /// `containerRuntimeEndpoint`; `None` means wasmlet runs its own containerd (`up`).
    pub runtime_endpoint: Option<String>,
    /// `staticPodPath`.
    pub static_pod_path: Option<PathBuf>,
    /// `fileCheckFrequency`.
    pub file_check_frequency: Duration,
    /// `syncFrequency`.
    pub sync_frequency: Duration,
    /// `maxPods`.
    pub max_pods: u32,
    /// `maxParallelStartCalls` (wasmlet's): RunPodSandbox / CreateContainer /
    /// StartContainer calls at once; `None`: 4 per CPU; 0: no limit.
    pub max_parallel_start_calls: Option<u32>,
    /// `healthzBindAddress`:`healthzPort` (port 0: off).
    pub healthz: (IpAddr, u16),
    /// `address`:`readOnlyPort` (port 0: off; without `address`, loopback only).
    pub read_only: (IpAddr, u16),
    /// The kubelet server (`None`: `enableServer: false`).
    pub server: Option<ServerConfig>,
    /// `rootDir`.
    pub root_dir: PathBuf,
    /// `podLogsDir`.
    pub pod_logs_dir: PathBuf,
    /// `resolvConf`.
    pub resolv_conf: PathBuf,
    /// `clusterDNS` and `clusterDomain`.
    pub cluster_dns: ClusterDns,
    /// `allowedUnsafeSysctls`: sysctls (or `prefix*` patterns) pods may set beyond the
    /// safe set; the shipped `sysctls` admission plugin is given them.
    pub allowed_unsafe_sysctls: Vec<String>,
    /// `podPidsLimit` (`None`: -1, no limit).
    pub pod_pids_limit: Option<u64>,
    /// Pod-level cgroups: `cgroupsPerQOS` and a `cgroupDriver` of `cgroupfs` (the
    /// defaults); `None` when off.
    pub pod_cgroup_parent: Option<String>,
    /// `nodeLabels`: labels the node registers with.
    pub node_labels: BTreeMap<String, String>,
    /// `registerWithTaints`.
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// `kubeReserved` plus `systemReserved`.
    pub reserved: Reserved,
    /// `nodeStatusUpdateFrequency`, `nodeStatusReportFrequency`, `nodeLeaseDurationSeconds`.
    pub timing: Timing,
    /// `kubeAPIQPS`, `kubeAPIBurst`, `eventRecordQPS`, `eventBurst`.
    pub limits: Limits,
    /// `containerLogMaxSize`, `containerLogMaxFiles`, `containerLogMaxWorkers`,
    /// `containerLogMonitorInterval`.
    pub log_rotation: wasmlet_logs::Rotation,
    /// Eviction, image garbage collection and how often usage is sampled.
    pub resources: Resources,
    /// `plugins` (`None`: the shipped plugins).
    pub plugins: Option<PluginsConfig>,
    /// `clusterPlugins`: WasmletPlugins followed in cluster mode, and what they may be
    /// given.
    pub cluster_plugins: wasmlet_fleet::FleetConfig,
}

/// The kubelet's default runtime endpoint.
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

fn duration(field: &str, text: Option<&str>, default: Duration) -> Result<Duration> {
    match text {
        None => Ok(default),
        Some(t) => {
            let d = parse_duration(t).map_err(|e| anyhow::anyhow!("{field}: {e}"))?;
            if d.is_zero() {
                bail!("{field}: must be more than 0");
            }
            Ok(d)
        }
    }
}

/// A `kubeReserved` / `systemReserved` map.
fn reserved(field: &str, map: Option<&BTreeMap<String, serde_yaml_ng::Value>>) -> Result<Reserved> {
    let mut r = Reserved::default();
    for (name, value) in map.into_iter().flatten() {
        let at = |e: String| anyhow::anyhow!("{field}.{name}: {e}");
        // A quantity: a string, or a plain number (`cpu: 1`).
        let value = &match value {
            serde_yaml_ng::Value::String(s) => s.clone(),
            serde_yaml_ng::Value::Number(n) => n.to_string(),
            other => bail!("{field}.{name}: {other:?} is not a quantity"),
        };
        match name.as_str() {
            "cpu" => r.cpu_millis = parse_quantity(value, 3).map_err(at)?,
            "memory" => r.memory_bytes = parse_quantity(value, 0).map_err(at)?,
            "ephemeral-storage" => {
                r.ephemeral_storage_bytes = parse_quantity(value, 0).map_err(at)?;
            }
            // Accepted; the agent limits pids per pod (podPidsLimit), not per node.
            "pid" => {
                parse_quantity(value, 0).map_err(at)?;
            }
            other => bail!(
                "{field}.{other}: not a resource that can be reserved (cpu, memory, ephemeral-storage, pid)"
            ),
        }
    }
    Ok(r)
}

/// A QPS / burst pair.
fn rate(
    qps_field: &str,
    qps: Option<f64>,
    burst_field: &str,
    burst: Option<i64>,
    default: (f64, u32),
) -> Result<(f64, u32)> {
    let qps = match qps {
        None => default.0,
        Some(q) if q.is_finite() && q >= 0.0 => q,
        Some(q) => bail!("{qps_field}: {q} must be 0 or more"),
    };
    let burst = match burst {
        None => default.1,
        Some(b) if b > 0 => u32::try_from(b).unwrap_or(u32::MAX),
        Some(b) => bail!("{burst_field}: {b} must be more than 0"),
    };
    Ok((qps, burst))
}

fn port(field: &str, value: Option<i64>, default: u16) -> Result<u16> {
    match value {
        None => Ok(default),
        Some(v) => {
            u16::try_from(v).map_err(|_| anyhow::anyhow!("{field}: {v} is not a port (0 to 65535)"))
        }
    }
}

fn address(field: &str, value: Option<&str>) -> Result<IpAddr> {
    value
        .unwrap_or("127.0.0.1")
        .parse()
        .map_err(|_| anyhow::anyhow!("{field}: {:?} is not an IP address", value.unwrap_or("")))
}

/// The error of the first field that does not deserialize, with its path
/// (`plugins.admission[0].failurePolicy: unknown variant ...`): each top-level field is
/// read alone from YAML text, where the deserializer tracks the path.
fn field_error(value: &serde_yaml_ng::Value) -> Option<String> {
    let map = value.as_mapping()?;
    for (k, v) in map {
        let mut one = serde_yaml_ng::Mapping::new();
        one.insert(k.clone(), v.clone());
        let text = serde_yaml_ng::to_string(&one).ok()?;
        if let Err(e) = serde_yaml_ng::from_str::<File>(&text) {
            let message = e.to_string();
            // Lines and columns would point into the re-serialized text, not the file.
            let message = match message.rfind(" at line ") {
                Some(i) => message[..i].to_owned(),
                None => message,
            };
            let key = k.as_str().unwrap_or("?");
            return Some(if message.starts_with(key) {
                message
            } else {
                format!("{key}: {message}")
            });
        }
    }
    None
}

impl Config {
    /// The start calls the agent makes at once on a node of `cpus` CPUs: the configured
    /// `maxParallelStartCalls`, else 4 per CPU (0: no limit).
    pub fn start_parallelism(&self, cpus: u64) -> usize {
        self.max_parallel_start_calls.map_or_else(
            || wasmlet_agent::sync::pacing::default_limit(cpus),
            |n| n as usize,
        )
    }

    /// The configuration `wasmlet up` uses: its own containerd, static pods from
    /// `manifests`, state under `state_dir`.
    pub fn embedded(manifests: &Path, state_dir: &Path) -> Self {
        Config {
            node_name: None,
            node_ip: None,
            kubeconfig: None,
            runtime_endpoint: None,
            static_pod_path: Some(manifests.to_owned()),
            file_check_frequency: Duration::from_secs(20),
            sync_frequency: Duration::from_secs(60),
            max_pods: 110,
            max_parallel_start_calls: None,
            healthz: ([127, 0, 0, 1].into(), 10248),
            read_only: ([127, 0, 0, 1].into(), 10255),
            server: Some(ServerConfig::embedded()),
            root_dir: state_dir.to_owned(),
            pod_logs_dir: state_dir.join("pod-logs"),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            cluster_dns: ClusterDns::default(),
            allowed_unsafe_sysctls: Vec::new(),
            pod_pids_limit: None,
            pod_cgroup_parent: Some(wasmlet_agent::cgroups::DEFAULT_PARENT.into()),
            node_labels: BTreeMap::new(),
            taints: Vec::new(),
            reserved: Reserved::default(),
            timing: Timing::default(),
            limits: Limits::default(),
            log_rotation: wasmlet_logs::Rotation::default(),
            resources: Resources::development(),
            plugins: None,
            cluster_plugins: wasmlet_fleet::FleetConfig::default(),
        }
    }

    /// Reads and checks `path`; warnings go to the log.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&text, path)
    }

    /// Parses configuration text read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let at = || format!("{}", path.display());
        let mut value: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).with_context(|| format!("{}: not valid YAML", at()))?;
        if value.is_null() {
            value = serde_yaml_ng::Value::Mapping(Default::default());
        }
        let Some(map) = value.as_mapping_mut() else {
            bail!("{}: the configuration must be a mapping of fields", at());
        };
        let ignored: Vec<String> = map
            .keys()
            .filter_map(|k| k.as_str())
            .filter(|k| NOT_IMPLEMENTED.contains(k))
            .map(str::to_owned)
            .collect();
        for field in &ignored {
            tracing::warn!(
                file = %at(),
                "KubeletConfiguration field {field} is not implemented by wasmlet; ignored"
            );
            map.remove(field.as_str());
        }
        let file: File = match serde_yaml_ng::from_value(value.clone()) {
            Ok(f) => f,
            Err(e) => bail!("{}: {}", at(), field_error(&value).unwrap_or(e.to_string())),
        };
        let with_file = |e: anyhow::Error| anyhow::anyhow!("{}: {e}", at());
        if let Some(kind) = file.kind.as_deref()
            && kind != "KubeletConfiguration"
        {
            bail!(
                "{}: kind: expected KubeletConfiguration, found {kind}",
                at()
            );
        }
        if let Some(v) = file.api_version.as_deref()
            && !v.starts_with("kubelet.config.k8s.io/")
        {
            bail!(
                "{}: apiVersion: expected kubelet.config.k8s.io/v1beta1, found {v}",
                at()
            );
        }
        let max_pods = match file.max_pods {
            None => 110,
            Some(n) if n > 0 && n <= 100_000 => u32::try_from(n).unwrap_or(110),
            Some(n) => bail!("{}: maxPods: {n} must be between 1 and 100000", at()),
        };
        let max_parallel_start_calls = match file.max_parallel_start_calls {
            None => None,
            Some(n) if (0..=10_000).contains(&n) => u32::try_from(n).ok(),
            Some(n) => bail!(
                "{}: maxParallelStartCalls: {n} must be between 0 (no limit) and 10000",
                at()
            ),
        };
        if let Some(e) = &file.container_runtime_endpoint {
            wasmlet_cri::Endpoint::parse(e)
                .map_err(|err| anyhow::anyhow!("{}: containerRuntimeEndpoint: {err}", at()))?;
        }
        for (field, p) in [
            ("staticPodPath", &file.static_pod_path),
            ("rootDir", &file.root_dir),
            ("podLogsDir", &file.pod_logs_dir),
        ] {
            if let Some(p) = p
                && !p.is_absolute()
            {
                bail!(
                    "{}: {field}: {} must be an absolute path",
                    at(),
                    p.display()
                );
            }
        }
        let pod_pids_limit = match file.pod_pids_limit {
            None | Some(-1) => None,
            Some(n) if n > 0 => u64::try_from(n).ok(),
            Some(n) => bail!(
                "{}: podPidsLimit: {n} must be -1 (no limit) or a positive number",
                at()
            ),
        };
        let pod_cgroup_parent = match file.cgroup_driver.as_deref() {
            None | Some("cgroupfs") => {
                let root = file.cgroup_root.as_deref().unwrap_or("/");
                if !root.starts_with('/') {
                    bail!(
                        "{}: cgroupRoot: {root:?} must be an absolute cgroup path",
                        at()
                    );
                }
                let parent = format!(
                    "{}/{}",
                    root.trim_matches('/'),
                    wasmlet_agent::cgroups::DEFAULT_PARENT
                );
                file.cgroups_per_qos
                    .unwrap_or(true)
                    .then(|| parent.trim_start_matches('/').to_owned())
            }
            Some("systemd") => {
                tracing::warn!(
                    file = %at(),
                    "cgroupDriver: systemd: wasmlet makes pod-level cgroups with cgroupfs only; pods go where the runtime puts them{}",
                    if pod_pids_limit.is_some() { " and podPidsLimit is not applied" } else { "" }
                );
                None
            }
            Some(other) => bail!(
                "{}: cgroupDriver: {other:?} must be cgroupfs or systemd",
                at()
            ),
        };
        if let Some(ip) = &file.node_ip {
            ip.parse::<IpAddr>()
                .map_err(|_| anyhow::anyhow!("{}: nodeIP: {ip:?} is not an IP address", at()))?;
        }
        let root_dir = file
            .root_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/var/lib/wasmlet"));
        let taints = file.register_with_taints.unwrap_or_default();
        for (i, t) in taints.iter().enumerate() {
            if t.key.is_empty() {
                bail!("{}: registerWithTaints[{i}].key: must not be empty", at());
            }
            if !matches!(
                t.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            ) {
                bail!(
                    "{}: registerWithTaints[{i}].effect: {:?} must be NoSchedule, PreferNoSchedule or NoExecute",
                    at(),
                    t.effect
                );
            }
        }
        let kubelet_address = file
            .address
            .as_deref()
            .map(|a| address("address", Some(a)))
            .transpose()
            .map_err(with_file)?;
        let server = server::server(server::ServerFields {
            enable_server: file.enable_server,
            address: kubelet_address,
            port: file.port,
            tls_cert_file: file.tls_cert_file,
            tls_private_key_file: file.tls_private_key_file,
            tls_min_version: file.tls_min_version,
            tls_cipher_suites: file.tls_cipher_suites,
            authentication: file.authentication,
            authorization: file.authorization,
        })
        .map_err(with_file)?;
        let node_labels = file.node_labels.unwrap_or_default();
        check_node_labels(&node_labels)
            .map_err(|e| anyhow::anyhow!("{}: nodeLabels: {e}", at()))?;
        let reserved = reserved("kubeReserved", file.kube_reserved.as_ref())
            .and_then(|k| Ok(k.plus(reserved("systemReserved", file.system_reserved.as_ref())?)))
            .map_err(with_file)?;
        let defaults = Timing::default();
        let timing = Timing {
            update: duration(
                "nodeStatusUpdateFrequency",
                file.node_status_update_frequency.as_deref(),
                defaults.update,
            )
            .map_err(with_file)?,
            report: duration(
                "nodeStatusReportFrequency",
                file.node_status_report_frequency.as_deref(),
                defaults.report,
            )
            .map_err(with_file)?,
            lease_seconds: match file.node_lease_duration_seconds {
                None => defaults.lease_seconds,
                Some(n) if n > 0 => i32::try_from(n).unwrap_or(i32::MAX),
                Some(n) => bail!(
                    "{}: nodeLeaseDurationSeconds: {n} must be more than 0",
                    at()
                ),
            },
        };
        let d = Limits::default();
        let (api_qps, api_burst) = rate(
            "kubeAPIQPS",
            file.kube_api_qps,
            "kubeAPIBurst",
            file.kube_api_burst,
            (d.api_qps, d.api_burst),
        )
        .map_err(with_file)?;
        let (event_qps, event_burst) = rate(
            "eventRecordQPS",
            file.event_record_qps,
            "eventBurst",
            file.event_burst,
            (d.event_qps, d.event_burst),
        )
        .map_err(with_file)?;
        let log_rotation = logs::rotation(logs::LogFields {
            max_size: file.container_log_max_size,
            max_files: file.container_log_max_files,
            max_workers: file.container_log_max_workers,
            monitor_interval: file.container_log_monitor_interval,
        })
        .map_err(with_file)?;
        let cluster_plugins = file.cluster_plugins.unwrap_or_default();
        cluster_plugins
            .validate()
            .map_err(|e| with_file(anyhow::anyhow!("clusterPlugins.{e}")))?;
        let resources = resources::resources(resources::ResourceFields {
            eviction_hard: file.eviction_hard,
            eviction_soft: file.eviction_soft,
            eviction_soft_grace_period: file.eviction_soft_grace_period,
            eviction_minimum_reclaim: file.eviction_minimum_reclaim,
            eviction_pressure_transition_period: file.eviction_pressure_transition_period,
            eviction_max_pod_grace_period: file.eviction_max_pod_grace_period,
            image_gc_high_threshold_percent: file.image_gc_high_threshold_percent,
            image_gc_low_threshold_percent: file.image_gc_low_threshold_percent,
            image_minimum_gc_age: file.image_minimum_gc_age,
            housekeeping_interval: file.housekeeping_interval,
            node_status_max_images: file.node_status_max_images,
        })
        .map_err(with_file)?;
        let cluster_dns = cluster_dns(file.cluster_dns, file.cluster_domain).map_err(with_file)?;
        let allowed_unsafe_sysctls =
            unsafe_sysctls(file.allowed_unsafe_sysctls.unwrap_or_default()).map_err(with_file)?;
        Ok(Config {
            node_name: file.node_name,
            node_ip: file.node_ip,
            kubeconfig: file.kubeconfig,
            runtime_endpoint: Some(
                file.container_runtime_endpoint
                    .unwrap_or_else(|| DEFAULT_RUNTIME_ENDPOINT.to_owned()),
            ),
            static_pod_path: file.static_pod_path,
            file_check_frequency: duration(
                "fileCheckFrequency",
                file.file_check_frequency.as_deref(),
                Duration::from_secs(20),
            )
            .map_err(with_file)?,
            sync_frequency: duration(
                "syncFrequency",
                file.sync_frequency.as_deref(),
                Duration::from_secs(60),
            )
            .map_err(with_file)?,
            max_pods,
            max_parallel_start_calls,
            healthz: (
                address("healthzBindAddress", file.healthz_bind_address.as_deref())
                    .map_err(with_file)?,
                port("healthzPort", file.healthz_port, 10248).map_err(with_file)?,
            ),
            read_only: (
                kubelet_address.unwrap_or(IpAddr::from([127, 0, 0, 1])),
                port("readOnlyPort", file.read_only_port, 10255).map_err(with_file)?,
            ),
            server,
            pod_logs_dir: file
                .pod_logs_dir
                .unwrap_or_else(|| root_dir.join("pod-logs")),
            root_dir,
            resolv_conf: file
                .resolv_conf
                .unwrap_or_else(|| PathBuf::from("/etc/resolv.conf")),
            cluster_dns,
            allowed_unsafe_sysctls,
            pod_pids_limit,
            pod_cgroup_parent,
            node_labels,
            taints,
            reserved,
            timing,
            limits: Limits {
                api_qps,
                api_burst,
                event_qps,
                event_burst,
            },
            log_rotation,
            resources,
            plugins: file.plugins,
            cluster_plugins,
        })
    }
}

#[cfg(test)]
mod tests;
