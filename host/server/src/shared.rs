//! What the kubelet server's handlers share: their state, the plain-text error answer,
//! a query's pairs. The router (`routes`) sends paths to the node-log and stats
//! handlers; they, like it, take what they share from here and never from the router.

use std::sync::Arc;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use wasmlet_agent::agent::Agent;

use crate::proxy::OpenStreams;

/// What the routes share.
pub struct Shared<R> {
    /// The agent.
    pub agent: Arc<Agent<R>>,
    /// `/metrics` as Prometheus text.
    pub metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// `/metrics/probes` as Prometheus text.
    pub probe_metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// `/configz`'s `kubeletconfig`.
    pub configz: serde_json::Value,
    /// Streams open through the proxy.
    pub open: OpenStreams,
    /// What `/logs/` serves (`/var/log`).
    pub node_log_dir: std::path::PathBuf,
    /// The node's usage samples (`/stats/summary`, `/metrics/resource`,
    /// `/metrics/cadvisor`); `None`: not collected.
    pub stats: Option<Arc<wasmlet_stats::Stats>>,
}

/// A plain-text error answer.
pub fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.into(),
    )
        .into_response()
}

/// `key=value` pairs of a query string, percent-decoded (`+` is a space).
pub fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}
