//! Cluster mode's wiring: the API server connection, the cluster's WasmletPlugins, and
//! the node's registration, status and lease.

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use tracing::info;
use wasmlet_agent::agent::Agent;
use wasmlet_agent::node::NodeFacts;
use wasmlet_cluster::certificates::csr::Request;
use wasmlet_cluster::certificates::rotation::Rotation;
use wasmlet_cluster::certificates::store::{self, Store};
use wasmlet_cluster::certificates::{self, bootstrap};
use wasmlet_cluster::node::NodeState;
use wasmlet_cri::CriClient;
use wasmlet_stats::eviction::run::PressureState;

use crate::config::Config;
use crate::plugins::Loaded;

/// The API server's client, in cluster mode. With `--bootstrap-kubeconfig`, a missing
/// or expired kubeconfig is made first (TLS bootstrap); with `rotateCertificates`, the
/// client certificate is renewed before it expires and new connections use the new
/// one. A kubeconfig that cannot be used stops the start, naming the file.
pub(super) async fn connect(
    config: &Config,
    node: &str,
    stop: CancellationToken,
) -> Result<Option<kube::Client>> {
    let Some(kubeconfig) = &config.kubeconfig else {
        return Ok(None);
    };
    let certs = &config.certificates;
    let store = Store::new(&certs.dir, store::CLIENT);
    if let Some(boot) = &certs.bootstrap_kubeconfig {
        bootstrap::ensure(kubeconfig, boot, &store, node)
            .await
            .context("TLS bootstrap")?;
    }
    if !certs.rotate_client {
        return Ok(Some(wasmlet_cluster::connect::client(kubeconfig).await?));
    }
    let in_use = bootstrap::kubeconfig_certificate(kubeconfig)?;
    let adopted = certificates::adopt_embedded(kubeconfig, in_use.as_ref(), &store)
        .context("rotateCertificates: storing the kubeconfig's client certificate")?;
    let Some(pair) = store.current().or(in_use.clone()) else {
        info!("rotateCertificates: the kubeconfig has no client certificate to rotate");
        return Ok(Some(wasmlet_cluster::connect::client(kubeconfig).await?));
    };
    let renew_now = adopted.is_some();
    let client =
        certificates::rotating_client(kubeconfig, &pair, store, node, in_use, renew_now, stop)
            .await?;
    Ok(Some(client))
}

/// `serverTLSBootstrap`: the serving certificate requested from the cluster for the
/// node's names and addresses, renewed before it expires; until it is issued the
/// server has none.
pub(super) fn serving_certificate(
    config: &Config,
    client: &kube::Client,
    node: &str,
    names: Vec<String>,
    ips: Vec<std::net::IpAddr>,
    stop: CancellationToken,
) -> wasmlet_server::tls::ClusterCertificate {
    let slot = wasmlet_server::tls::ClusterCertificate::default();
    let publish = slot.clone();
    Rotation {
        store: Store::new(&config.certificates.dir, store::SERVER),
        request: Request::serving(node, names, ips),
        publish: Arc::new(move |p| match p.certified_key() {
            Ok(key) => publish.set(key),
            Err(e) => tracing::warn!("serving certificate not used: {e}"),
        }),
        fallback: None,
        renew_now: false,
    }
    .spawn(client.clone(), stop);
    slot
}

/// Where the cluster's plugins go on the node, and what they see of it.
pub(super) struct PluginTargets<'a> {
    /// The node's own plugins, which the cluster's join.
    pub loaded: &'a Loaded,
    /// Events on the WasmletPlugins.
    pub events: wasmlet_fleet::PluginEvents,
    /// The pods the node admitted, which a new admission policy is asked about.
    pub admitted: wasmlet_fleet::AdmittedPods,
}

/// The cluster's WasmletPlugins that select this node join its own plugins; what it
/// served before a restart serves again before any pod is admitted.
pub(super) async fn start_plugins(
    client: &kube::Client,
    config: &Config,
    facts: &NodeFacts,
    targets: PluginTargets<'_>,
    stopped: CancellationToken,
) -> Result<()> {
    let PluginTargets {
        loaded,
        events,
        admitted,
    } = targets;
    if !config.cluster_plugins.enabled {
        return Ok(());
    }
    let labels = facts
        .object(true, "", &wasmlet_agent::time::now_rfc3339())
        .metadata
        .labels
        .unwrap_or_default();
    let dir = config.root_dir.join("plugins/cluster");
    wasmlet_fleet::start(
        client.clone(),
        &facts.name,
        labels,
        &config.cluster_plugins,
        &dir,
        wasmlet_fleet::Targets {
            chain: loaded.chain.clone(),
            probes: loaded.probes.clone(),
            sources: loaded.sources.clone(),
            events,
            admitted: Some(admitted),
        },
        stopped,
    )
    .await
    .with_context(|| format!("cluster plugins: {}", dir.display()))?;
    Ok(())
}

/// What the node reports beside its pods.
pub(super) struct Reported {
    /// The runtime's name and version, as the node status shows it.
    pub runtime_version: String,
    /// The kubelet server's port.
    pub port: i32,
    /// The eviction manager's pressure.
    pub pressure: Arc<PressureState>,
    /// Events for the API server.
    pub events: Option<wasmlet_cluster::events::EventQueue>,
    /// Whether the node is shutting down (then it is not ready).
    pub shutdown: wasmlet_shutdown::ShutdownState,
}

/// Registers the node and keeps its status, its lease and its mirror pods.
pub(super) fn start_node(
    client: kube::Client,
    config: &Config,
    agent: &Arc<Agent<CriClient>>,
    reported: Reported,
    stopped: CancellationToken,
) {
    let facts = agent.node.clone();
    info!(node = %facts.name, "cluster mode: registering the node; pods bound to it come from the API server");
    let (images, _images) = wasmlet_stats::images::NodeImages::start(
        agent.ctx.runtime.clone(),
        config.resources.max_images,
    );
    let state = {
        let agent = agent.clone();
        let Reported {
            runtime_version,
            port,
            pressure,
            shutdown,
            ..
        } = &reported;
        let (version, port, pressure) = (runtime_version.clone(), *port, pressure.clone());
        let shutdown = shutdown.clone();
        move || NodeState {
            images: images.get(),
            devices: super::devices::for_status(agent.ctx.devices.as_deref()),
            not_ready: shutdown
                .not_ready()
                .or_else(|| agent.readiness().err().map(|e| e.to_string())),
            runtime_version: version.clone(),
            port,
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
            facts,
            taints: config.taints.clone(),
            timing: config.timing,
            statuses: agent.ctx.statuses.clone(),
            sources: agent.sources(),
            sources_ready: Arc::new(move || ready.sources_ready()),
            events: reported.events,
            limits: config.limits,
        },
        state,
        stopped,
    );
}
