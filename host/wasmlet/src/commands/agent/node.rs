//! The agent's own wiring: the node's facts, admission (the plugins' chain and the
//! eviction manager's pressure), the agent's options and its pod cgroups.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tracing::warn;
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::cgroups::PodCgroups;
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

/// Admission: the plugins' chain, then the eviction manager's own check (no BestEffort
/// pods under memory pressure, none under disk pressure).
pub(super) fn admission(
    loaded: &Loaded,
    facts: &NodeFacts,
    pressure: &Arc<PressureState>,
) -> Result<Admission> {
    let node = convert::node(&facts.object(true, "", &wasmlet_agent::time::now_rfc3339()))
        .map_err(|e| anyhow::anyhow!("the node as plugins see it: {e}"))?;
    let node_check: wasmlet_agent::syncloop::NodeCheck = {
        let pressure = pressure.clone();
        Arc::new(move |pod| wasmlet_stats::eviction::admit(&pressure.current(), pod))
    };
    Ok(Admission {
        chain: loaded.chain.clone(),
        node: Arc::new(node),
        node_check: Some(node_check),
    })
}

/// Starts the agent: its pod sources (the API server's in cluster mode, the plugins'),
/// probes through the plugins, events to `events`.
pub(super) fn start(
    config: &Config,
    runtime: Arc<CriClient>,
    facts: NodeFacts,
    loaded: &Loaded,
    admission: Admission,
    cluster: Option<&kube::Client>,
    events: Option<Arc<dyn wasmlet_agent::events::Recorder>>,
) -> Arc<Agent<CriClient>> {
    let start_parallelism = config.start_parallelism(facts.cpus);
    let options = AgentOptions {
        node: facts,
        root_dir: config.root_dir.clone(),
        pod_logs_dir: config.pod_logs_dir.clone(),
        resolv_conf: config.resolv_conf.clone(),
        sync_frequency: config.sync_frequency,
        relist_period: Duration::from_secs(1),
        sources: match cluster {
            Some(_) => vec![wasmlet_agent::pod::API_SOURCE.to_owned()],
            None => Vec::new(),
        },
        pod_cgroups: pod_cgroups(config),
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

/// Pod-level cgroups as configured, where this process can make them (as root, with a
/// cgroup filesystem mounted); otherwise pods go where the runtime puts them.
fn pod_cgroups(config: &Config) -> Option<PodCgroups> {
    let parent = config.pod_cgroup_parent.as_deref()?;
    match PodCgroups::detect(Path::new("/sys/fs/cgroup"), parent, config.pod_pids_limit) {
        Ok(found) => Some(found),
        Err(why) => {
            warn!(
                "no pod-level cgroups ({why}): pods go where the runtime puts them{}",
                if config.pod_pids_limit.is_some() {
                    "; podPidsLimit is not applied"
                } else {
                    ""
                }
            );
            None
        }
    }
}
