//! The agent's own wiring: the node's facts, admission (the plugins' chain and the
//! eviction manager's pressure), the agent's options and its pod cgroups.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::cgroups::fs::CgroupFs;
use wasmlet_agent::cgroups::tree::Driver;
use wasmlet_agent::cgroups::{PodCgroups, ReservedCgroup, Setup, StartError};
use wasmlet_agent::node::NodeFacts;
use wasmlet_agent::prober::Checker;
use wasmlet_agent::syncloop::Admission;
use wasmlet_cri::CriClient;
use wasmlet_plugin_host::convert;
use wasmlet_stats::eviction::run::PressureState;

use crate::config::Config;
use crate::plugins::Loaded;

/// The node as configured: name (`nodeName`, else `--hostname-override`, else the
/// hostname), address, labels and reservations.
pub(super) fn facts(config: &Config) -> NodeFacts {
    let name = config
        .node_name
        .as_deref()
        .or(config.hostname_override.as_deref());
    let mut facts = NodeFacts::read(
        name,
        config.node_ip.as_deref(),
        &config.root_dir,
        config.max_pods,
    );
    if let Some(h) = &config.hostname_override {
        facts.hostname = h.to_lowercase();
    }
    facts.labels = config.node_labels.clone();
    facts.reserved = config.reserved;
    facts
}

/// Whether the host enforces AppArmor (runc's test: the module says it is enabled).
fn apparmor_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.starts_with('Y'))
}

/// Admission: the node's own checks (no pods while it shuts down; the eviction
/// manager's: no BestEffort pods under memory pressure, none under disk pressure; none
/// for another operating system; none asking for AppArmor on a host without it), then
/// the plugins' chain.
pub(super) fn admission(
    loaded: &Loaded,
    facts: &NodeFacts,
    pressure: &Arc<PressureState>,
    shutdown: &wasmlet_shutdown::ShutdownState,
) -> Result<Admission> {
    let node = convert::node(&facts.object(true, "", &wasmlet_agent::time::now_rfc3339()))
        .map_err(|e| anyhow::anyhow!("the node as plugins see it: {e}"))?;
    let apparmor = apparmor_enabled();
    let node_check: wasmlet_agent::syncloop::NodeCheck = {
        let (pressure, shutdown) = (pressure.clone(), shutdown.clone());
        Arc::new(move |pod| {
            shutdown
                .admit()
                .or_else(|| wasmlet_stats::eviction::admit(&pressure.current(), pod))
                .or_else(|| wasmlet_core::pod::os_rejection(pod))
                .or_else(|| wasmlet_core::pod::apparmor_rejection(pod, apparmor))
        })
    };
    Ok(Admission {
        chain: loaded.chain.clone(),
        node: Arc::new(node),
        admitted: Arc::default(),
        node_check: Some(node_check),
    })
}

/// Starts the agent: its pod sources (the API server's in cluster mode, the plugins'),
/// probes through the plugins, events to `events`, pods in the cgroup tree.
#[allow(clippy::too_many_arguments)]
pub(super) fn start(
    config: &Config,
    runtime: Arc<CriClient>,
    facts: NodeFacts,
    loaded: &Loaded,
    admission: Admission,
    cluster: Option<&kube::Client>,
    events: Option<Arc<dyn wasmlet_agent::events::Recorder>>,
    pod_cgroups: Option<Arc<PodCgroups>>,
    devices: Option<Arc<wasmlet_devices::Manager>>,
) -> Arc<Agent<CriClient>> {
    let start_parallelism = config.start_parallelism(facts.cpus);
    let options = AgentOptions {
        node_cgroups: wasmlet_agent::criconfig::node_cgroups(
            config.container_cgroups.single_process_oom_kill,
            config.container_cgroups.swap,
        ),
        node: facts,
        root_dir: config.root_dir.clone(),
        pod_logs_dir: config.pod_logs_dir.clone(),
        resolv_conf: config.resolv_conf.clone(),
        sync_frequency: config.sync_frequency,
        relist_period: Duration::from_secs(1),
        sources: match cluster {
            Some(_) => vec![wasmlet_core::pod::API_SOURCE.to_owned()],
            None => Vec::new(),
        },
        pod_cgroups,
        events,
        volumes: cluster.map(|c| {
            Arc::new(wasmlet_cluster::volumes::ApiVolumes::new(c.clone()))
                as Arc<dyn wasmlet_agent::volumes::VolumeSource>
        }),
        // One watch of the cluster's Services for the whole node: the containers'
        // Service variables are read from it.
        services: cluster.map(|c| {
            let (watch, _task) = wasmlet_cluster::services::ServiceWatch::start(c.clone());
            Arc::new(watch) as Arc<dyn wasmlet_agent::criconfig::services::ServiceSource>
        }),
        cluster_dns: config.cluster_dns.clone(),
        start_parallelism,
        devices,
    };
    let checker: Arc<dyn Checker> = loaded.probes.clone();
    Arc::new(Agent::start(
        runtime,
        options,
        checker,
        Some(admission),
        Some(loaded.sources.clone()),
    ))
}

/// Graceful node shutdown, when configured: the agent's pods stopped by priority when
/// systemd-logind announces a shutdown (it holds a delay lock of logind until then).
pub(super) fn graceful_shutdown(
    config: &Config,
    agent: &Arc<Agent<CriClient>>,
    state: wasmlet_shutdown::ShutdownState,
    stop: CancellationToken,
) {
    if config.shutdown.groups.is_empty() {
        return;
    }
    let pods = Arc::new(wasmlet_shutdown::AgentPods(agent.clone()));
    wasmlet_shutdown::Manager::new(config.shutdown.groups.clone(), pods, state).spawn(stop);
}

/// `kubepods`' pids limit, as the kubelet sets it: the node's pid capacity
/// (`kernel.pid_max` or `kernel.threads-max`, the smaller), less the `pid` reservations
/// when `pods` is enforced.
fn kubepods_pids(config: &Config, enforce_pods: bool) -> Option<u64> {
    let read = |name: &str| std::fs::read_to_string(format!("/proc/sys/kernel/{name}")).ok();
    let capacity = wasmlet_agent::cgroups::values::node_pid_capacity(
        read("pid_max").as_deref(),
        read("threads-max").as_deref(),
    )?;
    let reserved = if enforce_pods {
        config.reserved.pids
    } else {
        0
    };
    Some(capacity.saturating_sub(reserved))
}

/// The pods' cgroup tree as configured: `kubepods` with allocatable (capacity when
/// `enforceNodeAllocatable` leaves out `pods`), the tiers, the reserved cgroups. Where
/// this process cannot make cgroups (no cgroup filesystem, not root) pods go where the
/// runtime puts them, with a warning; what the kubelet refuses (a reserved cgroup that
/// does not exist, systemd unreachable under its driver) stops the start.
pub(super) async fn pod_cgroups(
    config: &Config,
    facts: &NodeFacts,
) -> Result<Option<Arc<PodCgroups>>> {
    let Some(tree) = &config.cgroups else {
        return Ok(None);
    };
    let setup = Setup {
        driver: tree.driver,
        cgroup_root: tree.root.clone(),
        pids_limit: config.pod_pids_limit,
        capacity: (facts.cpus.saturating_mul(1000), facts.memory_bytes),
        reserved: (config.reserved.cpu_millis, config.reserved.memory_bytes),
        enforce_pods: tree.enforce_pods,
        kubepods_pids: kubepods_pids(config, tree.enforce_pods),
        hugepages: wasmlet_agent::criconfig::node_hugepages()
            .into_iter()
            .map(|(size, _)| size)
            .collect(),
        cpus: std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty()),
        reserved_cgroups: tree
            .reserved
            .iter()
            .map(|r| ReservedCgroup {
                field: r.field,
                cgroup: r.cgroup.clone(),
                cpu_milli: r.reserved.cpu_millis,
                memory: r.reserved.memory_bytes,
            })
            .collect(),
    };
    let unavailable = |why: String| {
        warn!(
            "no pod cgroups ({why}): pods go where the runtime puts them{}",
            if config.pod_pids_limit.is_some() {
                "; podPidsLimit is not applied"
            } else {
                ""
            }
        );
        Ok(None)
    };
    let fs = match CgroupFs::detect(Path::new("/sys/fs/cgroup")) {
        Ok(fs) => fs,
        Err(why) if tree.driver == Driver::Cgroupfs => return unavailable(why.to_string()),
        Err(why) => anyhow::bail!("cgroupDriver: systemd: {why}"),
    };
    match PodCgroups::start(fs, setup).await {
        Ok(tree) => {
            info!(kubepods = %tree.root_cgroup(), "pod cgroups: the QoS tree is in place");
            Ok(Some(Arc::new(tree)))
        }
        Err(StartError::Unavailable(why)) if tree.driver == Driver::Cgroupfs => unavailable(why),
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}
