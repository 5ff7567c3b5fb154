//! The agent's local HTTP endpoints.
//!
//! - healthz (`healthzBindAddress:healthzPort`, 127.0.0.1:10248): `GET /healthz` is
//!   `ok`, or 500 with the reason when PLEG is not healthy (`?verbose` lists the checks).
//! - read-only (`address:readOnlyPort`, 127.0.0.1:10255): `GET /pods` (a v1 PodList with
//!   current statuses), `GET /metrics` (Prometheus text: the kubelet's metric names and
//!   the plugins'), `GET /plugins` (loaded plugins, digest and version), `GET /node` (the
//!   node with its Ready condition), `GET /stats/summary` (`?only_cpu_and_memory=true`)
//!   and `GET /metrics/resource` as the kubelet serves them there, and `/healthz`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use wasmlet_agent::agent::Agent;
use wasmlet_cri::CriClient;
use wasmlet_plugin_host::Plugin;

use crate::plugins::Loaded;

/// What the endpoints read.
pub struct Endpoints {
    /// The agent.
    pub agent: Arc<Agent<CriClient>>,
    /// Its plugins.
    pub plugins: Arc<Loaded>,
    /// Every metric.
    pub registry: Arc<Registry>,
    /// The node's usage samples.
    pub stats: Arc<wasmlet_stats::Stats>,
}

type Shared = Arc<Endpoints>;

fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// `GET /stats/summary[?only_cpu_and_memory=true]`: the latest usage sample (503 until
/// the first is taken).
async fn summary(State(s): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let Some(latest) = s.stats.latest() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "failed to get node info: the first stats sample is not taken yet",
        )
            .into_response();
    };
    let only = query.is_some_and(|q| q.split('&').any(|p| p == "only_cpu_and_memory=true"));
    if only {
        json(&latest.summary.cpu_and_memory())
    } else {
        json(&latest.summary)
    }
}

/// `GET /metrics/resource`: the resource metrics of the latest sample.
async fn resource_metrics(State(s): State<Shared>) -> Response {
    let body = wasmlet_stats::metrics::resource(s.stats.latest().as_deref());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn healthz(State(s): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let pleg = s.agent.health.check();
    let verbose = query.is_some_and(|q| q.split('&').any(|p| p == "verbose"));
    let status = if pleg.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    let body = if verbose {
        let runtime = if s.agent.runtime_state.ready() {
            "[+]runtime ok".to_string()
        } else {
            format!("[-]runtime not ready: {}", s.agent.runtime_state.message())
        };
        let pleg_line = match &pleg {
            Ok(()) => "[+]pleg ok".to_string(),
            Err(e) => format!("[-]pleg failed: {e}"),
        };
        format!(
            "[+]ping ok\n{runtime}\n{pleg_line}\nhealthz check {}\n",
            if pleg.is_ok() { "passed" } else { "failed" }
        )
    } else {
        match pleg {
            Ok(()) => "ok".to_string(),
            Err(e) => e.to_string(),
        }
    };
    (status, body).into_response()
}

async fn pods(State(s): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        s.agent.ctx.statuses.pod_list_json(),
    )
        .into_response()
}

async fn node(State(s): State<Shared>) -> Response {
    json(&s.agent.node_object())
}

async fn metrics(State(s): State<Shared>) -> Response {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &s.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

fn describe(kind: &str, p: &dyn Plugin) -> serde_json::Value {
    serde_json::json!({
        "kind": kind,
        "name": p.name(),
        "version": &p.digest()[..p.digest().len().min(12)],
        "digest": format!("sha256:{}", p.digest()),
        "loadedFrom": format!("{:?}", p.load_outcome()),
    })
}

async fn plugins(State(s): State<Shared>) -> Response {
    let mut list = Vec::new();
    for name in s.plugins.chain.names() {
        match s.plugins.chain.current(&name) {
            Some(p) => list.push(describe("admission", &*p)),
            None => list.push(serde_json::json!({
                "kind": "admission",
                "name": name,
                "error": s.plugins.chain.unavailable(&name).unwrap_or_default(),
            })),
        }
    }
    for p in s.plugins.probes.loaded() {
        list.push(describe("probe", &*p));
    }
    for p in s.plugins.sources.loaded() {
        list.push(describe("source", &*p));
    }
    json(&serde_json::json!({ "plugins": list }))
}

async fn serve(addr: SocketAddr, router: Router, what: &'static str) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({what})"))?;
    tracing::info!(%addr, "{what} listening");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(%addr, "{what} stopped: {e}");
        }
    });
    Ok(())
}

/// Starts the healthz and read-only servers (a port of 0 turns one off).
pub async fn start(
    endpoints: Endpoints,
    healthz_addr: SocketAddr,
    read_only_addr: SocketAddr,
) -> Result<()> {
    let shared: Shared = Arc::new(endpoints);
    if healthz_addr.port() != 0 {
        let router = Router::new()
            .route("/healthz", get(healthz))
            .with_state(shared.clone());
        serve(healthz_addr, router, "healthz").await?;
    }
    if read_only_addr.port() != 0 {
        let router = Router::new()
            .route("/healthz", get(healthz))
            .route("/pods", get(pods))
            .route("/metrics", get(metrics))
            .route("/plugins", get(plugins))
            .route("/node", get(node))
            .route("/stats/summary", get(summary))
            .route("/metrics/resource", get(resource_metrics))
            .with_state(shared);
        serve(read_only_addr, router, "read-only endpoint").await?;
    }
    Ok(())
}
