//! The kubelet server's wiring: its names and addresses, the API server's reviews when
//! there is one, the metrics it serves.

use std::sync::Arc;

use anyhow::Result;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::warn;
use wasmlet_agent::agent::Agent;
use wasmlet_cri::CriClient;

use crate::config::Config;

/// The port the node reports as its kubelet endpoint when the server is off (the
/// kubelet's `port` default).
const KUBELET_PORT: i32 = 10250;

/// What the agent's listeners serve.
pub(super) struct Serving<'a> {
    pub config: &'a Config,
    pub agent: &'a Arc<Agent<CriClient>>,
    pub loaded: &'a Arc<crate::plugins::Loaded>,
    pub registry: &'a Arc<Registry>,
    pub stats: &'a Arc<wasmlet_stats::Stats>,
    pub cluster: Option<&'a kube::Client>,
}

/// Starts healthz, the read-only port and the kubelet server; returns the port the node
/// reports (a `port` of 0 takes a free one, for several agents on one machine).
pub(super) async fn listen(s: Serving<'_>, stop: CancellationToken) -> Result<i32> {
    let config = s.config;
    crate::http::start(
        crate::http::Endpoints {
            agent: s.agent.clone(),
            plugins: s.loaded.clone(),
            registry: s.registry.clone(),
            stats: s.stats.clone(),
        },
        std::net::SocketAddr::new(config.healthz.0, config.healthz.1),
        std::net::SocketAddr::new(config.read_only.0, config.read_only.1),
    )
    .await?;
    let Some(server) = &config.server else {
        return Ok(KUBELET_PORT);
    };
    let served = start(
        config, server, s.agent, s.registry, s.stats, s.cluster, stop,
    )
    .await?;
    Ok(i32::from(served.addr.port()))
}

/// Starts the kubelet server on port 10250 (or as configured).
async fn start(
    config: &Config,
    server: &crate::config::ServerConfig,
    agent: &Arc<Agent<CriClient>>,
    registry: &Arc<Registry>,
    stats: &Arc<wasmlet_stats::Stats>,
    cluster: Option<&kube::Client>,
    stop: CancellationToken,
) -> Result<wasmlet_server::Served> {
    let node = &agent.node;
    if cluster.is_none() {
        warn_standalone(server);
    }
    let self_signed = wasmlet_server::tls::SelfSigned {
        dir: config.root_dir.join("pki"),
        names: node_names(node),
        ips: node.ip.parse().into_iter().collect(),
    };
    let mut tls = server.tls.clone();
    // serverTLSBootstrap: the cluster signs the certificate (the files win).
    if let Some(client) = cluster
        && config.certificates.server_bootstrap
        && tls.cert_file.is_none()
    {
        tls.from_cluster = Some(super::cluster::serving_certificate(
            config,
            client,
            &node.name,
            self_signed.names.clone(),
            self_signed.ips.clone(),
            stop,
        ));
    }
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
            tls,
            self_signed,
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

/// The names the serving certificate is for: the node's name (its Hostname address)
/// and the host's name when it differs.
fn node_names(node: &wasmlet_agent::node::NodeFacts) -> Vec<String> {
    let mut names = vec![node.name.clone()];
    if node.hostname != node.name && !node.hostname.is_empty() {
        names.push(node.hostname.clone());
    }
    names
}

/// Standalone, a server that asks the API server refuses everything: say so.
fn warn_standalone(server: &crate::config::ServerConfig) {
    if server.authz.mode == wasmlet_server::authz::Mode::Webhook {
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
