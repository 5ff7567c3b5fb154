//! `/stats/summary`, `/metrics/resource` and `/metrics/cadvisor`: the node's latest
//! usage sample ([`wasmlet_stats::Stats`]) as the kubelet serves it.

// The failure is the response to send, built once per request on the way out.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use wasmlet_cri::CriRuntime;

use crate::shared::{Shared, error, pairs};

/// The Prometheus text format's content type.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

fn sample<R>(s: &Shared<R>) -> Result<Option<Arc<wasmlet_stats::Sample>>, Response> {
    match &s.stats {
        Some(stats) => Ok(stats.latest()),
        None => Err(error(
            StatusCode::NOT_FOUND,
            "stats are not collected on this node",
        )),
    }
}

/// `GET /stats/summary[?only_cpu_and_memory=true]`.
pub async fn summary<R: CriRuntime + 'static>(
    State(s): State<Arc<Shared<R>>>,
    RawQuery(query): RawQuery,
) -> Response {
    let latest = match sample(&s) {
        Ok(Some(l)) => l,
        Ok(None) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "failed to get node info: the first stats sample is not taken yet",
            );
        }
        Err(r) => return r,
    };
    let only = pairs(query.as_deref())
        .iter()
        .any(|(k, v)| k == "only_cpu_and_memory" && v == "true");
    let body = if only {
        serde_json::to_vec(&latest.summary.cpu_and_memory())
    } else {
        serde_json::to_vec(&latest.summary)
    };
    match body {
        Ok(b) => ([(header::CONTENT_TYPE, "application/json")], b).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `GET /metrics/resource`.
pub async fn resource<R: CriRuntime + 'static>(State(s): State<Arc<Shared<R>>>) -> Response {
    match sample(&s) {
        Ok(l) => text(wasmlet_stats::metrics::resource(l.as_deref())),
        Err(r) => r,
    }
}

/// `GET /metrics/cadvisor`.
pub async fn cadvisor<R: CriRuntime + 'static>(State(s): State<Arc<Shared<R>>>) -> Response {
    match sample(&s) {
        Ok(l) => text(wasmlet_stats::metrics::cadvisor(l.as_deref())),
        Err(r) => r,
    }
}

fn text(body: String) -> Response {
    ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], body).into_response()
}
