//! `wasmlet up` and `wasmlet run`: the agent itself.
//!
//! `run` takes the kubelet's command line (`--config FILE`, `--kubeconfig`, …; run as
//! `kubelet`, the binary is `wasmlet run`) and runs the agent against its
//! `containerRuntimeEndpoint`. `up` is the embedded default: it starts
//! and supervises its own containerd under a state directory (installing it on first
//! use, through `scripts/containerd.sh`), loads the shipped plugins and runs the static
//! pods of a directory. Either way the agent stops on SIGINT or SIGTERM and leaves its
//! pods running; started again, it adopts them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{ArgMatches, Args, FromArgMatches};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wasmlet_cri::CriClient;

use crate::config::{Config, Given};
use crate::plugins;

mod cluster;
mod containerd;
mod devices;
mod node;
mod server;

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

/// Arguments of `wasmlet run`: the kubelet's flags ([`crate::config::flags`]).
#[derive(Debug, Clone, Default)]
pub struct RunArgs(pub Given);

impl FromArgMatches for RunArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(RunArgs(Given::from_matches(m)))
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.0 = Given::from_matches(m);
        Ok(())
    }
}

impl Args for RunArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.args(crate::config::flags::args())
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// `wasmlet run` (or `kubelet`).
pub async fn run(args: RunArgs) -> Result<()> {
    if args.0.version() {
        println!("Kubernetes {}", wasmlet_cluster::node::kubelet_version());
        return Ok(());
    }
    let config = Config::from_flags(&args.0)?;
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
    let own = state_dir.join("containerd");
    let endpoint = containerd::up(&own)?;
    info!(%endpoint, manifests = %manifests.display(), "wasmlet up: own containerd running");
    run_agent(config, endpoint, Some(own)).await
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

pub(crate) async fn shutdown_signal() {
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

/// The composition root: each subsystem started in turn; the agent runs until SIGINT
/// or SIGTERM and leaves its pods running.
async fn run_agent(
    config: Config,
    endpoint: String,
    own_containerd: Option<PathBuf>,
) -> Result<()> {
    for dir in [&config.root_dir, &config.pod_logs_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let facts = node::facts(&config);
    // First: what the node cannot do (a reserved cgroup missing, systemd unreachable
    // under its driver) stops the start before anything is asked of the cluster.
    let pod_cgroups = node::pod_cgroups(&config, &facts).await?;
    // Cancelled at SIGINT or SIGTERM: every loop the agent starts stops on it.
    let stop = CancellationToken::new();
    // The API server's credentials (TLS bootstrap: one CSR round trip) while the plugins
    // compile.
    let plugins_config = plugins::effective(&config)?;
    let (cluster, loaded) = tokio::join!(
        cluster::connect(&config, &facts.name, stop.clone()),
        plugins::load(&plugins_config)
    );
    let (cluster, loaded) = (cluster?, Arc::new(loaded?));
    let runtime = Arc::new(connect(&endpoint).await);
    let pressure = Arc::new(wasmlet_stats::eviction::run::PressureState::default());
    // Cluster mode: events go to the API server.
    let (recorder, events) = cluster
        .as_ref()
        .map(|_| wasmlet_cluster::events::ApiRecorder::new())
        .unzip();
    let shutdown = wasmlet_shutdown::ShutdownState::default();
    let admission = node::admission(&loaded, &facts, &pressure, &shutdown)?;
    if let (Some(client), Some(recorder)) = (&cluster, &recorder) {
        let plugin_events = wasmlet_fleet::PluginEvents::new(recorder.clone(), &facts.name);
        let admitted = wasmlet_fleet::AdmittedPods {
            node: admission.node.clone(),
            pods: admission.admitted.clone(),
        };
        let targets = cluster::PluginTargets {
            loaded: &loaded,
            events: plugin_events,
            admitted,
        };
        let stopped = stop.clone();
        cluster::start_plugins(client, &config, &facts, targets, stopped).await?;
    }
    let runtime_version = runtime_version(&runtime);
    let devices = devices::start(&config, stop.clone());
    let agent = node::start(
        &config,
        runtime,
        facts,
        &loaded,
        admission,
        cluster.as_ref(),
        recorder
            .clone()
            .map(|r| r as Arc<dyn wasmlet_agent::events::Recorder>),
        pod_cgroups,
        devices,
    );
    let registry = metrics(&agent, recorder.as_deref(), &loaded);
    let stats = housekeeping(&config, &agent, &pressure);
    let serving = server::Serving {
        config: &config,
        agent: &agent,
        loaded: &loaded,
        registry: &registry,
        stats: &stats,
        cluster: cluster.as_ref(),
    };
    let port = server::listen(serving, stop.clone()).await?;
    let _log_rotation = log_rotation(&config, &agent);
    let _scavenger = scavenge();
    if let Some(dir) = own_containerd {
        tokio::spawn(containerd::supervise(agent.clone(), dir));
    }
    node::graceful_shutdown(&config, &agent, shutdown.clone(), stop.clone());
    if let Some(client) = cluster {
        let reported = cluster::Reported {
            runtime_version,
            port,
            pressure,
            events,
            shutdown,
        };
        cluster::start_node(client, &config, &agent, reported, stop.clone());
    }
    run_until_stopped(&agent, &stop).await
}

/// The runtime's name and version as the node reports them (`containerd://1.6.20`).
fn runtime_version(runtime: &CriClient) -> String {
    let negotiated = &runtime.negotiated().version;
    wasmlet_cluster::node::runtime_version(&negotiated.runtime_name, &negotiated.runtime_version)
}

/// Runs until SIGINT or SIGTERM, then stops the agent (its pods keep running) and
/// returns; `main` gives what is still in flight a moment, not a wait.
async fn run_until_stopped(
    agent: &wasmlet_agent::agent::Agent<CriClient>,
    stop: &CancellationToken,
) -> Result<()> {
    shutdown_signal().await;
    info!("stopping (pods keep running; a restarted agent adopts them)");
    stop.cancel();
    agent.shutdown().await;
    Ok(())
}

/// Usage of the node and its pods, sampled every housekeeping period (the kubelet
/// server's /stats/summary and usage metrics read it); eviction and image garbage
/// collection act on each sample.
fn housekeeping(
    config: &Config,
    agent: &Arc<wasmlet_agent::agent::Agent<CriClient>>,
    pressure: &Arc<wasmlet_stats::eviction::run::PressureState>,
) -> Arc<wasmlet_stats::Stats> {
    let (stats, _task) = wasmlet_stats::agent::housekeeping(
        agent,
        &config.root_dir,
        config.resources.period,
        config.resources.eviction.clone(),
        image_gc(config),
        pressure.clone(),
    );
    stats
}

/// The agent's, the events' and the plugins' metrics in one registry.
fn metrics(
    agent: &wasmlet_agent::agent::Agent<CriClient>,
    recorder: Option<&wasmlet_cluster::events::ApiRecorder>,
    loaded: &plugins::Loaded,
) -> Arc<Registry> {
    let mut registry = Registry::default();
    agent.ctx.metrics.register(&mut registry);
    if let Some(r) = recorder {
        r.register(&mut registry);
    }
    loaded.engine.metrics().register(&mut registry);
    Arc::new(registry)
}

/// How often the idle agent gives its allocator's free pages back to the kernel.
const SCAVENGE_PERIOD: Duration = Duration::from_secs(10);

/// When the agent pages out its own executable, once: by then start-up is over.
const START_UP_PAGES_FOR: Duration = Duration::from_secs(60);

/// Every [`SCAVENGE_PERIOD`], the allocator's free pages back to the kernel, as Go's
/// background scavenger does for the kubelet: measured at 30 pods (bench/LOG.md, "Where
/// a node's memory is now"), 3 MB of the idle agent's 11–14 MB of anonymous memory were
/// pages freed after the pods started, which glibc would otherwise keep. And once,
/// [`START_UP_PAGES_FOR`] after start, the pages of the executable: of the 19.5 MB of
/// code and read-only data the package's binary had resident at 30 pods, about 7 MB were
/// run by start-up alone (the configuration, the plugins' loading, adopting the pods);
/// what the steady agent runs comes back at its first touch.
fn scavenge() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        let started = tokio::time::Instant::now();
        let mut start_up_paged_out = false;
        let mut tick = tokio::time::interval(SCAVENGE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !start_up_paged_out && started.elapsed() >= START_UP_PAGES_FOR {
                let bytes = wasmlet_plugin_host::memory::page_out_own_executable();
                tracing::debug!(bytes, "the executable's start-up pages paged out");
                start_up_paged_out = true;
            }
            if !wasmlet_plugin_host::memory::return_free_pages() {
                return;
            }
        }
    })
}

/// Image garbage collection as configured; `--pod-infra-container-image` is never
/// collected.
fn image_gc(config: &Config) -> wasmlet_stats::imagegc::ImageGc {
    let mut gc = wasmlet_stats::imagegc::ImageGc::new(config.resources.images);
    if let Some(image) = &config.sandbox_image {
        gc.protect(image);
    }
    gc
}

/// `containerLogMaxSize` / `containerLogMaxFiles`, every `containerLogMonitorInterval`,
/// on this node's containers (those it adopted from the kubelet included).
fn log_rotation(
    config: &Config,
    agent: &wasmlet_agent::agent::Agent<CriClient>,
) -> tokio::task::JoinHandle<()> {
    wasmlet_logs::LogManager::new(agent.ctx.runtime.clone(), config.log_rotation)
        .with_owner(wasmlet_core::runtime::NODE_LABEL, &agent.node.name)
        .spawn()
}
