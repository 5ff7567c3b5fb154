//! `wasmlet up` and `wasmlet run --config FILE`: the agent itself.
//!
//! `run` reads a configuration file (a KubeletConfiguration is accepted) and runs the
//! agent against its `containerRuntimeEndpoint`. `up` is the embedded default: it starts
//! and supervises its own containerd under a state directory (installing it on first
//! use, through `scripts/containerd.sh`), loads the shipped plugins and runs the static
//! pods of a directory. Either way the agent stops on SIGINT or SIGTERM and leaves its
//! pods running; started again, it adopts them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use prometheus_client::registry::Registry;
use tracing::{info, warn};
use wasmlet_agent::agent::{Agent, AgentOptions};
use wasmlet_agent::cgroups::PodCgroups;
use wasmlet_agent::node::NodeFacts;
use wasmlet_agent::prober::Checker;
use wasmlet_agent::syncloop::Admission;
use wasmlet_cluster::node::NodeState;
use wasmlet_cri::CriClient;
use wasmlet_plugin_host::convert;

use crate::config::Config;
use crate::{http, plugins};

/// The port the node reports as its kubelet endpoint (the kubelet's `port` default).
const KUBELET_PORT: i32 = 10250;

/// Arguments of `wasmlet up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Directory of static pod manifests.
    #[arg(long, default_value = "examples/static-pods")]
    pub manifests: PathBuf,
    /// Where the agent and its own containerd keep their state.
    #[arg(long, default_value = "/var/lib/wasmlet")]
    pub state_dir: PathBuf,
}

/// Arguments of `wasmlet run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The configuration file (YAML; a KubeletConfiguration is accepted).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Join the cluster this kubeconfig names (overrides the file's `kubeconfig`).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Node name (overrides the file's `nodeName`): several agents on one machine each
    /// take their own.
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// Labels the node registers with, `key=value,…` (added to the file's `nodeLabels`).
    #[arg(long, value_name = "LABELS", value_delimiter = ',')]
    pub node_labels: Vec<String>,
}

/// `wasmlet run`.
pub async fn run(args: RunArgs) -> Result<()> {
    let mut config = Config::load(&args.config)?;
    if let Some(k) = args.kubeconfig {
        config.kubeconfig = Some(k);
    }
    if let Some(n) = args.node_name {
        config.node_name = Some(n);
    }
    for label in args.node_labels.iter().filter(|l| !l.is_empty()) {
        let Some((k, v)) = label.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            bail!("--node-labels: {label:?} is not key=value");
        };
        config.node_labels.insert(k.to_owned(), v.to_owned());
    }
    crate::config::check_node_labels(&config.node_labels)
        .map_err(|e| anyhow::anyhow!("--node-labels: {e}"))?;
    let endpoint = config
        .runtime_endpoint
        .clone()
        .unwrap_or_else(|| crate::config::DEFAULT_RUNTIME_ENDPOINT.to_owned());
    run_agent(config, endpoint, None).await
}

/// `wasmlet up`.
pub async fn up(args: UpArgs) -> Result<()> {
    let cwd = std::env::current_dir().context("current directory")?;
    let manifests = cwd.join(&args.manifests);
    let state_dir = cwd.join(&args.state_dir);
    std::fs::create_dir_all(&manifests)
        .with_context(|| format!("--manifests {}", manifests.display()))?;
    let config = Config::embedded(&manifests, &state_dir);
    let containerd = state_dir.join("containerd");
    let endpoint = containerd_up(&containerd)?;
    info!(%endpoint, manifests = %manifests.display(), "wasmlet up: own containerd running");
    run_agent(config, endpoint, Some(containerd)).await
}

/// The project's containerd script.
fn containerd_script() -> PathBuf {
    std::env::var_os("WASMLET_CONTAINERD_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/containerd.sh")
        })
}

/// Starts (installing on first use) the containerd under `dir`; returns its endpoint.
fn containerd_up(dir: &Path) -> Result<String> {
    let script = containerd_script();
    let out = Command::new("bash")
        .arg(&script)
        .arg("up")
        .arg(dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} up {} failed (see above)",
            script.display(),
            dir.display()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Connects to the runtime, retrying with back-off while it is not there.
async fn connect(endpoint: &str) -> CriClient {
    let mut delay = Duration::from_secs(1);
    loop {
        match CriClient::connect(endpoint).await {
            Ok(c) => return c,
            Err(e) => {
                warn!("container runtime not reachable yet ({e}); retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn run_agent(
    config: Config,
    endpoint: String,
    own_containerd: Option<PathBuf>,
) -> Result<()> {
    for dir in [&config.root_dir, &config.pod_logs_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // Cluster mode: a kubeconfig that cannot be used stops the start, naming the file.
    let cluster = match &config.kubeconfig {
        Some(k) => Some(wasmlet_cluster::connect::client(k).await?),
        None => None,
    };
    let plugins_config = plugins::effective(&config)?;
    let loaded = Arc::new(plugins::load(&plugins_config).await?);
    let runtime = Arc::new(connect(&endpoint).await);
    let facts = NodeFacts {
        labels: config.node_labels.clone(),
        reserved: config.reserved,
        ..NodeFacts::read(
            config.node_name.as_deref(),
            config.node_ip.as_deref(),
            &config.root_dir,
            config.max_pods,
        )
    };
    let node = convert::node(&facts.object(true, "", &wasmlet_agent::time::now_rfc3339()))
        .map_err(|e| anyhow::anyhow!("the node as plugins see it: {e}"))?;
    // The eviction manager's pressure: the node's conditions and its own admission
    // check (no BestEffort pods under memory pressure, none under disk pressure).
    let pressure = Arc::new(wasmlet_stats::eviction::run::PressureState::default());
    let node_check: wasmlet_agent::syncloop::NodeCheck = {
        let pressure = pressure.clone();
        Arc::new(move |pod| wasmlet_stats::eviction::admit(&pressure.current(), pod))
    };
    let (stop_cluster, cluster_stopped) = tokio::sync::watch::channel(false);
    // Cluster mode: the cluster's WasmletPlugins that select this node join its own
    // plugins; what it served before a restart serves again before any pod is admitted.
    if let Some(client) = &cluster
        && config.cluster_plugins.enabled
    {
        let labels = facts
            .object(true, "", &wasmlet_agent::time::now_rfc3339())
            .metadata
            .labels
            .unwrap_or_default();
        wasmlet_fleet::start(
            client.clone(),
            &facts.name,
            labels,
            &config.cluster_plugins,
            &config.root_dir.join("plugins/cluster"),
            wasmlet_fleet::Targets {
                chain: loaded.chain.clone(),
                probes: loaded.probes.clone(),
                sources: loaded.sources.clone(),
            },
            cluster_stopped.clone(),
        )
        .await
        .with_context(|| {
            format!(
                "cluster plugins: {}",
                config.root_dir.join("plugins/cluster").display()
            )
        })?;
    }
    let admission = Admission {
        chain: loaded.chain.clone(),
        node: Arc::new(node),
        node_check: Some(node_check),
    };
    let node_facts = facts.clone();
    let negotiated = &runtime.negotiated().version;
    let runtime_version = wasmlet_cluster::node::runtime_version(
        &negotiated.runtime_name,
        &negotiated.runtime_version,
    );
    // Cluster mode: events go to the API server, and the API server is a pod source.
    let (api_recorder, events) = match &cluster {
        Some(_) => {
            let (r, q) = wasmlet_cluster::events::ApiRecorder::new();
            (Some(r), Some(q))
        }
        None => (None, None),
    };
    let recorder = api_recorder
        .clone()
        .map(|r| r as Arc<dyn wasmlet_agent::events::Recorder>);
    let sources = if cluster.is_some() {
        vec![wasmlet_agent::pod::API_SOURCE.to_owned()]
    } else {
        Vec::new()
    };
    let options = AgentOptions {
        node: facts,
        root_dir: config.root_dir.clone(),
        pod_logs_dir: config.pod_logs_dir.clone(),
        resolv_conf: config.resolv_conf.clone(),
        sync_frequency: config.sync_frequency,
        relist_period: Duration::from_secs(1),
        sources,
        pod_cgroups: pod_cgroups(&config),
        events: recorder,
        volumes: cluster.as_ref().map(|c| {
            Arc::new(wasmlet_cluster::volumes::ApiVolumes::new(c.clone()))
                as Arc<dyn wasmlet_agent::volumes::VolumeSource>
        }),
        // One watch of the cluster's Services for the whole node: the containers'
        // Service variables are read from it.
        services: cluster.as_ref().map(|c| {
            let (watch, _task) = wasmlet_cluster::services::ServiceWatch::start(c.clone());
            Arc::new(watch) as Arc<dyn wasmlet_agent::criconfig::services::ServiceSource>
        }),
        cluster_dns: config.cluster_dns.clone(),
        start_parallelism: config.start_parallelism(node_facts.cpus),
    };
    let checker: Arc<dyn Checker> = loaded.probes.clone();
    let agent = Arc::new(Agent::start(
        runtime,
        options,
        checker,
        Some(admission),
        Some(loaded.sources.clone()),
    ));
    let mut registry = Registry::default();
    agent.ctx.metrics.register(&mut registry);
    if let Some(r) = &api_recorder {
        r.register(&mut registry);
    }
    loaded.engine.metrics().register(&mut registry);
    let registry = Arc::new(registry);
    // Usage of the node and its pods, sampled every housekeeping period (the kubelet
    // server's /stats/summary and usage metrics read it); eviction and image garbage
    // collection act on each sample.
    let (stats, _housekeeping) = wasmlet_stats::agent::housekeeping(
        &agent,
        &config.root_dir,
        config.resources.period,
        config.resources.eviction.clone(),
        config.resources.images,
        pressure.clone(),
    );
    http::start(
        http::Endpoints {
            agent: agent.clone(),
            plugins: loaded.clone(),
            registry: registry.clone(),
        },
        SocketAddr::new(config.healthz.0, config.healthz.1),
        SocketAddr::new(config.read_only.0, config.read_only.1),
    )
    .await?;
    // The kubelet server: its port is what the node reports (a port of 0 takes a free
    // one, for several agents on one machine).
    let kubelet_port = match &config.server {
        Some(server) => {
            let served =
                start_server(&config, server, &agent, &registry, &stats, cluster.as_ref()).await?;
            i32::from(served.addr.port())
        }
        None => KUBELET_PORT,
    };
    // containerLogMaxSize / containerLogMaxFiles, every containerLogMonitorInterval, on
    // this node's containers.
    let _log_rotation =
        wasmlet_logs::LogManager::new(agent.ctx.runtime.clone(), config.log_rotation)
            .with_selector(
                [(
                    wasmlet_agent::runtime::NODE_LABEL.to_owned(),
                    agent.node.name.clone(),
                )]
                .into(),
            )
            .spawn();
    if let Some(dir) = own_containerd {
        tokio::spawn(supervise_containerd(agent.clone(), dir));
    }
    if let Some(client) = cluster {
        info!(node = %node_facts.name, "cluster mode: registering the node; pods bound to it come from the API server");
        let version = runtime_version.clone();
        let (images, _images) = wasmlet_stats::images::NodeImages::start(
            agent.ctx.runtime.clone(),
            config.resources.max_images,
        );
        let state = {
            let agent = agent.clone();
            let pressure = pressure.clone();
            move || NodeState {
                images: images.get(),
                not_ready: agent.readiness().err(),
                runtime_version: version.clone(),
                port: kubelet_port,
                pressure: {
                    use wasmlet_stats::eviction::Pressure as P;
                    wasmlet_cluster::node::Pressure {
                        memory: pressure.has(P::Memory),
                        disk: pressure.has(P::Disk),
                        pid: pressure.has(P::Pid),
                    }
                },
            }
        };
        let ready = agent.clone();
        wasmlet_cluster::start(
            wasmlet_cluster::Cluster {
                client,
                facts: node_facts,
                taints: config.taints.clone(),
                timing: config.timing,
                statuses: agent.ctx.statuses.clone(),
                sources: agent.sources(),
                sources_ready: Arc::new(move || ready.sources_ready()),
                events,
                limits: config.limits,
            },
            state,
            cluster_stopped,
        );
    }
    shutdown_signal().await;
    info!("stopping (pods keep running; a restarted agent adopts them)");
    let _ = stop_cluster.send(true);
    agent.shutdown().await;
    // Exit here: dropping the runtime would cancel plugin calls still in flight.
    std::process::exit(0)
}

/// Starts the kubelet server on port 10250 (or as configured).
async fn start_server(
    config: &Config,
    server: &crate::config::ServerConfig,
    agent: &Arc<Agent<CriClient>>,
    registry: &Arc<Registry>,
    stats: &Arc<wasmlet_stats::Stats>,
    cluster: Option<&kube::Client>,
) -> Result<wasmlet_server::Served> {
    use wasmlet_server::authz::Mode;
    let node = &agent.node;
    if cluster.is_none() {
        if server.authz.mode == Mode::Webhook {
            warn!(
                "kubelet server: authorization mode Webhook needs an API server (no kubeconfig): every request will be refused; set authorization.mode: AlwaysAllow for standalone use"
            );
        }
        if !server.authn.anonymous && server.tls.client_ca_file.is_none() {
            warn!(
                "kubelet server: no API server to check tokens, no client CA and anonymous access off: every request will be refused (401)"
            );
        }
    }
    let mut names = vec![node.name.clone()];
    if node.hostname != node.name && !node.hostname.is_empty() {
        names.push(node.hostname.clone());
    }
    let ips = node.ip.parse().into_iter().collect();
    let reviews = cluster.map(|c| Arc::new(wasmlet_server::review::ApiReviews::new(c.clone())));
    let text = |r: Arc<Registry>| -> Arc<dyn Fn() -> String + Send + Sync> {
        Arc::new(move || {
            let mut out = String::new();
            let _ = prometheus_client::encoding::text::encode(&mut out, &r);
            out
        })
    };
    let mut probes = Registry::default();
    agent.ctx.metrics.register_probes(&mut probes);
    let served = wasmlet_server::start(
        wasmlet_server::Settings {
            addr: server.addr,
            node_name: node.name.clone(),
            tls: server.tls.clone(),
            self_signed: wasmlet_server::tls::SelfSigned {
                dir: config.root_dir.join("pki"),
                names,
                ips,
            },
            authn: server.authn.clone(),
            authz: server.authz.clone(),
            node_log_dir: wasmlet_server::NODE_LOG_DIR.into(),
        },
        wasmlet_server::Parts {
            agent: agent.clone(),
            metrics: text(registry.clone()),
            probe_metrics: text(Arc::new(probes)),
            configz: config.configz(&node.name, node.cpus),
            tokens: reviews
                .clone()
                .map(|r| r as Arc<dyn wasmlet_server::authn::TokenReviewer>),
            access: reviews.map(|r| r as Arc<dyn wasmlet_server::authz::AccessReviewer>),
            stats: Some(stats.clone()),
        },
    )
    .await?;
    Ok(served)
}

/// Restarts the agent's own containerd when the runtime stays unreachable.
async fn supervise_containerd(agent: Arc<Agent<CriClient>>, dir: PathBuf) {
    let mut down_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if agent.runtime_state.ready() {
            down_since = None;
            continue;
        }
        let since = *down_since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= Duration::from_secs(6) {
            warn!("own containerd is not answering; starting it again");
            let dir = dir.clone();
            match tokio::task::spawn_blocking(move || containerd_up(&dir)).await {
                Ok(Ok(_)) => info!("own containerd restarted"),
                Ok(Err(e)) => warn!("restarting containerd failed: {e:#}"),
                Err(e) => warn!("restarting containerd failed: {e}"),
            }
            down_since = None;
        }
    }
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
