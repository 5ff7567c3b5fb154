//! The HTTP side: each request routed — to a node (the node proxy and the pods'
//! log/exec/attach/portforward), to the reviews, or to the objects of the store
//! ([`objects`], watches in [`watch`]) — and answered as the API server answers.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::node_proxy;
use crate::sim::ApiServerSim;
use crate::store::status;
use crate::values::percent_decode;

mod objects;
mod watch;

pub(crate) use watch::watch;

/// The parts of a request path.
pub(crate) struct Target {
    pub(crate) prefix: String,
    pub(crate) resource: String,
    pub(crate) ns: String,
    pub(crate) name: Option<String>,
    pub(crate) sub: Option<String>,
}

pub(crate) fn parse(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (prefix, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => (format!("api/{v}"), rest),
        ["apis", g, v, rest @ ..] => (format!("apis/{g}/{v}"), rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => ((*ns).to_owned(), rest),
        _ => (String::new(), rest),
    };
    let (resource, name, sub) = match rest {
        [r] => (r, None, None),
        [r, n] => (r, Some(n), None),
        [r, n, s] => (r, Some(n), Some(s)),
        _ => return None,
    };
    Some(Target {
        prefix,
        resource: (*resource).to_owned(),
        ns,
        name: name.map(|n| (*n).to_owned()),
        sub: sub.map(|s| (*s).to_owned()),
    })
}

pub(crate) fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

pub(crate) fn reply(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(crate) fn error(body: Value) -> Response {
    let code = body["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    reply(code, &body)
}

/// Where a request goes.
enum Route {
    /// `/api/v1/nodes/<node>/proxy/<rest>`.
    Node { node: String, rest: String },
    /// A pod's `log`, `exec`, `attach` or `portforward`, forwarded to its node.
    PodStream {
        ns: String,
        name: String,
        sub: String,
    },
    /// A TokenReview or SubjectAccessReview (`resource` names which).
    Review(String),
    /// Everything else: the objects of the store.
    Objects,
}

fn route(method: &Method, path: &str) -> Route {
    if let Some(rest) = path.strip_prefix("/api/v1/nodes/")
        && let Some((node, rest)) = rest.split_once("/proxy")
        && !node.contains('/')
    {
        let rest = rest.trim_start_matches('/').to_owned();
        return Route::Node {
            node: node.to_owned(),
            rest,
        };
    }
    if let Some(Target {
        prefix,
        resource,
        ns,
        name: Some(name),
        sub: Some(sub),
    }) = parse(path)
        && prefix == "api/v1"
        && resource == "pods"
        && matches!(sub.as_str(), "log" | "exec" | "attach" | "portforward")
    {
        return Route::PodStream { ns, name, sub };
    }
    if *method == Method::POST
        && matches!(
            path,
            "/apis/authentication.k8s.io/v1/tokenreviews"
                | "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        )
    {
        return Route::Review(path.rsplit('/').next().unwrap_or_default().to_owned());
    }
    Route::Objects
}

pub(crate) async fn handle(State(sim): State<ApiServerSim>, request: Request) -> Response {
    let method = request.method().clone();
    if method != Method::GET {
        let latency = *sim.latency.lock().unwrap_or_else(|p| p.into_inner());
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }
    let path = request.uri().path().to_owned();
    if crate::tls::expired(&request) {
        sim.lock()
            .failures
            .push((method.to_string(), path.clone(), 401));
        return error(status(
            401,
            "Unauthorized",
            "Unauthorized: x509: certificate has expired or is not yet valid".into(),
        ));
    }
    let record = || sim.lock().requests.push((method.to_string(), path.clone()));
    match route(&method, &path) {
        Route::Node { node, rest } => {
            record();
            node_proxy::handle_node(sim, node, rest, request).await
        }
        Route::PodStream { ns, name, sub } => {
            record();
            node_proxy::handle(sim, ns, name, sub, request).await
        }
        Route::Review(resource) => {
            let body = match body(request).await {
                Ok(b) => b,
                Err(e) => return e,
            };
            record();
            let Ok(review) = serde_json::from_slice::<Value>(&body) else {
                return error(status(400, "BadRequest", "the body is not JSON".into()));
            };
            reply(
                StatusCode::CREATED,
                &node_proxy::review(&sim, &resource, &review),
            )
        }
        Route::Objects => match objects::Call::read(&sim, method, path, request).await {
            Ok(call) => objects::serve(&sim, &call),
            Err(e) => e,
        },
    }
}

/// The request's body (at most 16 MiB).
async fn body(request: Request) -> Result<Bytes, Response> {
    axum::body::to_bytes(request.into_body(), 16 << 20)
        .await
        .map_err(|e| error(status(400, "BadRequest", format!("reading the body: {e}"))))
}
