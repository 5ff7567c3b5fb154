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
//! devicePluginDir: /var/lib/kubelet/device-plugins   # wasmlet's: where device plugins register (kubelet.sock); "" turns them off
//! podLogsDir: /var/lib/wasmlet/pod-logs
//! resolvConf: /etc/resolv.conf
//! clusterDNS: [10.96.0.10]              # ClusterFirst pods resolve through these
//! clusterDomain: cluster.local          # their search path: <ns>.svc.<domain> svc.<domain> <domain>
//! allowedUnsafeSysctls: [kernel.msg*]   # beyond the safe set (the shipped sysctls plugin)
//! podPidsLimit: 1024                    # pids.max of each pod's cgroup; -1: no limit
//! cgroupsPerQOS: true                   # the kubelet's tree: <cgroupRoot>/kubepods/{burstable,besteffort}/pod<uid>
//! cgroupRoot: /
//! cgroupDriver: cgroupfs                # or systemd: kubepods.slice/… made through systemd's D-Bus API
//! failCgroupV1: false                   # true: refuse to start on a cgroup v1 host
//! enforceNodeAllocatable: [pods]        # kubepods limited to capacity less kube-/systemReserved
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
//! evictionHard: {memory.available: 100Mi, nodefs.available: 10%}   # given: replaces all defaults…
//! mergeDefaultEvictionSettings: false   # …unless true: the defaults it does not name are kept
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
//! Every KubeletConfiguration v1beta1 field of Kubernetes 1.33 is accepted: implemented,
//! or warned about by name and ignored ([`fields::KUBELET_FIELDS`], the one table). Any
//! other unknown field, and every invalid value, is an error naming the file and the
//! field (or the flag that set it).
//!
//! The configuration is built in layers, as the kubelet builds its own: the file as
//! written ([`file`]), the kubelet's flags over it ([`flags`]), the kubelet's defaults
//! for what is left at zero ([`defaults`]), then each section checked into the runtime
//! [`Config`] ([`node`], [`runtime`], [`server`], [`cluster`], [`resources`], [`logs`],
//! [`pods`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use wasmlet_agent::agent::ClusterDns;
use wasmlet_agent::node::Reserved;
use wasmlet_cluster::Limits;
use wasmlet_cluster::node::Timing;
use wasmlet_plugin_host::config::PluginsConfig;

pub mod cgroups;
mod cluster;
mod configz;
mod defaults;
mod duration;
pub mod fields;
mod file;
pub mod flags;
mod labels;
mod logs;
mod node;
mod pods;
mod resources;
mod runtime;
mod server;
pub mod shutdown;

pub use defaults::RUNTIME_ENDPOINT as DEFAULT_RUNTIME_ENDPOINT;
pub use flags::{Given, Invocation};
pub use node::Certificates;
pub use resources::Resources;
pub use server::ServerConfig;

/// The agent's configuration, validated, defaults filled in.
#[derive(Debug, Clone)]
pub struct Config {
    /// `nodeName` (`None`: `--hostname-override`, else the hostname).
    pub node_name: Option<String>,
    /// `--hostname-override`: the node's name unless `nodeName` is given, and its
    /// Hostname address.
    pub hostname_override: Option<String>,
    /// `nodeIP`.
    pub node_ip: Option<String>,
    /// `kubeconfig` (cluster mode; not used standalone).
    pub kubeconfig: Option<PathBuf>,
    /// `--bootstrap-kubeconfig`, `--cert-dir`, `rotateCertificates`, `serverTLSBootstrap`.
    pub certificates: Certificates,
    /// `containerRuntimeEndpoint`; `None` means wasmlet runs its own containerd (`up`).
    pub runtime_endpoint: Option<String>,
    /// `--pod-infra-container-image`: never garbage-collected.
    pub sandbox_image: Option<String>,
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
    /// `devicePluginDir` (wasmlet's): where device plugins register; `None`: no device
    /// plugins.
    pub device_plugin_dir: Option<PathBuf>,
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
    /// The pods' cgroup tree (`cgroupsPerQOS`, `cgroupRoot`, `cgroupDriver`,
    /// `enforceNodeAllocatable`); `None` when `cgroupsPerQOS` is off.
    pub cgroups: Option<cgroups::Cgroups>,
    /// `singleProcessOOMKill` and `memorySwap`: what containers' cgroups get beyond
    /// their resources.
    pub container_cgroups: cgroups::ContainerCgroups,
    /// `nodeLabels`: labels the node registers with.
    pub node_labels: BTreeMap<String, String>,
    /// `registerWithTaints` (and `--cloud-provider=external`'s taint).
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
    /// Graceful node shutdown.
    pub shutdown: shutdown::Shutdown,
}

/// `p` when it is absolute (or not given); otherwise an error naming `field`.
fn absolute(field: &str, p: Option<PathBuf>) -> Result<Option<PathBuf>> {
    match p {
        Some(p) if !p.is_absolute() => {
            anyhow::bail!("{field}: {} must be an absolute path", p.display())
        }
        other => Ok(other),
    }
}

/// Where an error came from: the flag that set the field it names, else the file.
fn locate(
    e: anyhow::Error,
    file: Option<&Path>,
    origins: &BTreeMap<String, String>,
) -> anyhow::Error {
    let text = format!("{e:#}");
    if text.starts_with("--") {
        return anyhow::anyhow!(text);
    }
    let field = text.split([':', '.', '[']).next().unwrap_or("");
    match (origins.get(field), file) {
        (Some(flag), _) => anyhow::anyhow!("{flag}: {text}"),
        (None, Some(path)) => anyhow::anyhow!("{}: {text}", path.display()),
        (None, None) => anyhow::anyhow!("configuration: {text}"),
    }
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
            hostname_override: None,
            node_ip: None,
            kubeconfig: None,
            certificates: Certificates {
                dir: state_dir.join("pki"),
                ..Certificates::default()
            },
            runtime_endpoint: None,
            sandbox_image: None,
            static_pod_path: Some(manifests.to_owned()),
            file_check_frequency: Duration::from_secs(20),
            sync_frequency: Duration::from_secs(60),
            max_pods: 110,
            max_parallel_start_calls: None,
            healthz: ([127, 0, 0, 1].into(), 10248),
            read_only: ([127, 0, 0, 1].into(), 10255),
            server: Some(ServerConfig::embedded()),
            root_dir: state_dir.to_owned(),
            device_plugin_dir: None,
            pod_logs_dir: state_dir.join("pod-logs"),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            cluster_dns: ClusterDns::default(),
            allowed_unsafe_sysctls: Vec::new(),
            pod_pids_limit: None,
            cgroups: Some(cgroups::Cgroups {
                driver: wasmlet_agent::cgroups::tree::Driver::Cgroupfs,
                root: "/".into(),
                enforce_pods: true,
                reserved: Vec::new(),
            }),
            container_cgroups: cgroups::ContainerCgroups::default(),
            node_labels: BTreeMap::new(),
            taints: Vec::new(),
            reserved: Reserved::default(),
            timing: Timing::default(),
            limits: Limits::default(),
            log_rotation: wasmlet_logs::Rotation::default(),
            resources: Resources::development(),
            shutdown: shutdown::Shutdown::default(),
            plugins: None,
            cluster_plugins: wasmlet_fleet::FleetConfig::default(),
        }
    }

    /// The configuration the kubelet's command line asks for: the file `--config`
    /// names (none: the kubelet's command-line defaults), the flags over it.
    pub fn from_flags(given: &Given) -> Result<Self> {
        let file = given.config();
        let text = match &file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("--config: cannot read {}", path.display()))?,
            ),
            None => None,
        };
        let source = file.as_deref().zip(text.as_deref());
        Self::layers(source, given)
    }

    /// Parses configuration text read from `path` (no flags).
    #[cfg(test)]
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        Self::layers(Some((path, text)), &Given::default())
    }

    /// The file, the flags over it, the defaults, the checks.
    fn layers(source: Option<(&Path, &str)>, given: &Given) -> Result<Self> {
        let path = source.map(|(p, _)| p);
        let at = |e: anyhow::Error| match path {
            Some(p) => anyhow::anyhow!("{}: {e:#}", p.display()),
            None => e,
        };
        let mut map = match source {
            Some((_, text)) => file::mapping(text).map_err(at)?,
            None => Default::default(),
        };
        let mut origins = BTreeMap::new();
        let mut warnings = given.apply(&mut map, &mut origins)?;
        warnings.extend(fields::take_ignored(&mut map));
        for w in &warnings {
            match path {
                Some(p) => tracing::warn!(file = %p.display(), "{w}"),
                None => tracing::warn!("{w}"),
            }
        }
        let mut f = file::typed(map, &origins).map_err(|e| locate(e, path, &origins))?;
        let mode = defaults::Mode {
            legacy: source.is_none(),
            kubelet: given.as_kubelet,
        };
        defaults::apply(&mut f, mode);
        Self::build(f, &given.invocation()).map_err(|e| locate(e, path, &origins))
    }

    /// Checks each section of the defaulted file into the runtime configuration.
    fn build(mut f: file::File, inv: &Invocation) -> Result<Self> {
        check_kind(&f)?;
        let root_dir = runtime::root_dir(&f)?;
        let node = node::section(&mut f, inv, &root_dir)?;
        let run = runtime::section(&mut f, &root_dir)?;
        let listen = server::listeners(&mut f)?;
        let cluster_plugins = f.cluster_plugins.take().unwrap_or_default();
        cluster_plugins
            .validate()
            .map_err(|e| anyhow::anyhow!("clusterPlugins.{e}"))?;
        let plugins = f.plugins.take();
        if let Some(p) = &plugins {
            // The keys are read here too, so that a missing or broken one stops the start.
            p.signed_directory().map_err(anyhow::Error::msg)?;
        }
        Ok(Config {
            node_name: node.node_name,
            hostname_override: node.hostname_override,
            node_ip: node.node_ip,
            kubeconfig: node.kubeconfig,
            certificates: node.certificates,
            runtime_endpoint: Some(run.endpoint),
            sandbox_image: inv.sandbox_image.clone(),
            static_pod_path: run.static_pod_path,
            file_check_frequency: run.file_check_frequency,
            sync_frequency: run.sync_frequency,
            max_pods: run.max_pods,
            max_parallel_start_calls: run.max_parallel_start_calls,
            healthz: listen.healthz,
            read_only: listen.read_only,
            server: listen.server,
            root_dir,
            device_plugin_dir: run.device_plugin_dir,
            pod_logs_dir: run.pod_logs_dir,
            resolv_conf: run.resolv_conf,
            cluster_dns: pods::cluster_dns(
                std::mem::take(&mut f.cluster_dns),
                std::mem::take(&mut f.cluster_domain),
            )?,
            allowed_unsafe_sysctls: pods::unsafe_sysctls(std::mem::take(
                &mut f.allowed_unsafe_sysctls,
            ))?,
            pod_pids_limit: run.pod_pids_limit,
            cgroups: cgroups::section(&mut f)?,
            container_cgroups: cgroups::containers(&f)?,
            node_labels: node.labels,
            taints: node.taints,
            reserved: node.reserved,
            timing: cluster::timing(&f)?,
            limits: cluster::limits(&f)?,
            log_rotation: logs::rotation(logs::LogFields {
                max_size: f.container_log_max_size.take(),
                max_files: f.container_log_max_files,
                max_workers: f.container_log_max_workers,
                monitor_interval: f.container_log_monitor_interval.take(),
            })?,
            resources: resources(&mut f)?,
            shutdown: shutdown::section(&mut f)?,
            plugins,
            cluster_plugins,
        })
    }
}

/// `apiVersion` and `kind`, when given, are a KubeletConfiguration's.
fn check_kind(f: &file::File) -> Result<()> {
    if !f.kind.is_empty() && f.kind != "KubeletConfiguration" {
        anyhow::bail!("kind: expected KubeletConfiguration, found {}", f.kind);
    }
    if !f.api_version.is_empty() && !f.api_version.starts_with("kubelet.config.k8s.io/") {
        anyhow::bail!(
            "apiVersion: expected kubelet.config.k8s.io/v1beta1, found {}",
            f.api_version
        );
    }
    Ok(())
}

fn resources(f: &mut file::File) -> Result<Resources> {
    resources::resources(resources::ResourceFields {
        eviction_hard: f.eviction_hard.take(),
        merge_default_eviction_settings: f.merge_default_eviction_settings.unwrap_or(false),
        eviction_soft: f.eviction_soft.take(),
        eviction_soft_grace_period: f.eviction_soft_grace_period.take(),
        eviction_minimum_reclaim: f.eviction_minimum_reclaim.take(),
        eviction_pressure_transition_period: Some(f.eviction_pressure_transition_period.0),
        eviction_max_pod_grace_period: Some(f.eviction_max_pod_grace_period),
        image_gc_high_threshold_percent: f.image_gc_high_threshold_percent,
        image_gc_low_threshold_percent: f.image_gc_low_threshold_percent,
        image_minimum_gc_age: Some(f.image_minimum_gc_age.0),
        housekeeping_interval: f.housekeeping_interval.take(),
        node_status_max_images: f.node_status_max_images,
    })
}

#[cfg(test)]
mod tests;
