//! `pods/log`, `pods/exec`, `pods/attach` and `pods/portforward`: what the API server
//! forwards to the kubelet of the pod's node; and `nodes/NAME/proxy/PATH`, any kubelet
//! path (`/stats/summary`, `/metrics/resource`) as the API server's node proxy.
//!
//! As the real one, the double finds the pod's `spec.nodeName`, dials the first of the
//! node's addresses in the preferred order (`--kubelet-preferred-address-types`, Hostname
//! first by default) at `status.daemonEndpoints.kubeletEndpoint.Port` over TLS with its
//! own client certificate (CN `kube-apiserver-kubelet-client`, O `system:masters`,
//! signed by a CA it makes: [`crate::sim::ApiServerSim::kubelet_client_ca_pem`]), and sends
//! the kubelet's path (`/containerLogs/…`, `/exec/…?command=…&input=1&output=1`,
//! `/attach/…`, `/portForward/…?port=…`). Upgrades (SPDY, WebSocket) are carried both
//! ways after the kubelet switches protocols. The kubelet's serving certificate is
//! verified only when a CA is set for it (`--kubelet-certificate-authority`).

// Lookups answer with the response to send when they fail: built once per request, on
// the way out, so its size does not matter.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::log_ws;
use crate::sim::ApiServerSim;
use crate::store::{Store, status};
use crate::values::percent_decode;

fn reply(code: u16, reason: &str, message: String) -> Response<Body> {
    let body = status(code, reason, message);
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

/// Every `key=value` of a query, decoded.
fn params(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn truthy(v: &str) -> bool {
    !matches!(v, "false" | "0")
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Where the pod's kubelet is, and the container a request is about.
struct Routed {
    host: String,
    port: u16,
    /// The container named (or the pod's only one); otherwise the API server's words
    /// for a request that must name one.
    container: Result<String, String>,
}

fn route(
    store: &Store,
    namespace: &str,
    name: &str,
    container: Option<&str>,
    address_types: &[String],
) -> Result<Routed, Response<Body>> {
    let key = |r: &str, ns: &str, n: &str| {
        (
            "api/v1".to_owned(),
            r.to_owned(),
            ns.to_owned(),
            n.to_owned(),
        )
    };
    let Some(pod) = store.objects.get(&key("pods", namespace, name)) else {
        return Err(reply(404, "NotFound", format!("pods \"{name}\" not found")));
    };
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    if node_name.is_empty() {
        return Err(reply(
            400,
            "BadRequest",
            format!("pod {name} does not have a host assigned"),
        ));
    }
    let names: Vec<&str> = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|f| pod["spec"][f].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    let list = |field: &str| -> Vec<&str> {
        pod["spec"][field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect()
    };
    let container = match container {
        Some(c) if !names.contains(&c) => {
            return Err(reply(
                400,
                "BadRequest",
                format!("container {c} is not valid for pod {name}"),
            ));
        }
        Some(c) => Ok(c.to_owned()),
        None => match (list("containers").as_slice(), list("initContainers")) {
            ([only], _) => Ok((*only).to_owned()),
            (main, init) if init.is_empty() => Err(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                main.join(" ")
            )),
            (main, init) => Err(format!(
                "a container name must be specified for pod {name}, choose one of: [{}] or one of the init containers: [{}]",
                main.join(" "),
                init.join(" ")
            )),
        },
    };
    let (host, port) = node_address(store, node_name, address_types)?;
    Ok(Routed {
        host,
        port,
        container,
    })
}

/// The address and kubelet port the API server dials for node `node_name`: the first
/// address of the preferred types, `daemonEndpoints.kubeletEndpoint.Port` (10250).
fn node_address(
    store: &Store,
    node_name: &str,
    address_types: &[String],
) -> Result<(String, u16), Response<Body>> {
    let key = (
        "api/v1".to_owned(),
        "nodes".to_owned(),
        String::new(),
        node_name.to_owned(),
    );
    let Some(node) = store.objects.get(&key) else {
        return Err(reply(
            404,
            "NotFound",
            format!("nodes \"{node_name}\" not found"),
        ));
    };
    let addresses = node["status"]["addresses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let host = address_types.iter().find_map(|t| {
        addresses
            .iter()
            .find(|a| a["type"].as_str() == Some(t))
            .and_then(|a| a["address"].as_str())
            .map(str::to_owned)
    });
    let Some(host) = host else {
        return Err(reply(
            500,
            "InternalError",
            format!("no preferred addresses found; known addresses: {addresses:?}"),
        ));
    };
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(10250);
    Ok((host, port))
}

/// The double's client TLS configuration toward kubelets, or the 500 to answer.
fn kubelet_tls(sim: &ApiServerSim) -> Result<Arc<rustls::ClientConfig>, Response<Body>> {
    sim.kubelet_client().map(|c| c.tls.clone()).map_err(|e| {
        reply(
            500,
            "InternalError",
            format!("kubelet client certificate: {e}"),
        )
    })
}

/// Serves `nodes/NAME/proxy/PATH`: any method, forwarded to the node's kubelet at
/// `/PATH` with the query as given (`kubectl get --raw
/// /api/v1/nodes/NAME/proxy/stats/summary`).
pub(crate) async fn handle_node(
    sim: ApiServerSim,
    node: String,
    rest: String,
    request: Request<Body>,
) -> Response<Body> {
    let types = sim.address_types();
    let routed = {
        let store = sim.lock();
        node_address(&store, &node, &types)
    };
    let (host, port) = match routed {
        Ok(r) => r,
        Err(response) => return response,
    };
    let target = match request.uri().query() {
        Some(q) => format!("/{rest}?{q}"),
        None => format!("/{rest}"),
    };
    let tls = match kubelet_tls(&sim) {
        Ok(t) => t,
        Err(r) => return r,
    };
    match forward(request, &host, port, &target, tls).await {
        Ok(r) => r,
        Err(e) => reply(
            503,
            "ServiceUnavailable",
            format!("error trying to reach service: dial tcp {host}:{port}: {e}"),
        ),
    }
}

/// Serves `pods/NAME/{log,exec,attach,portforward}`.
pub(crate) async fn handle(
    sim: ApiServerSim,
    namespace: String,
    name: String,
    sub: String,
    request: Request<Body>,
) -> Response<Body> {
    let query = params(request.uri().query().unwrap_or(""));
    let types = sim.address_types();
    let routed = {
        let store = sim.lock();
        let container = value(&query, "container");
        route(&store, &namespace, &name, container.as_deref(), &types)
    };
    let routed = match routed {
        Ok(r) => r,
        Err(response) => return response,
    };
    let target = match kubelet_target(&sub, &namespace, &name, &query, &routed) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let tls = match kubelet_tls(&sim) {
        Ok(t) => t,
        Err(r) => return r,
    };
    // A log asked for over WebSocket: the kubelet answers a plain GET, the API server
    // wraps the answer.
    let (upgrade, request) = if sub == "log" && log_ws::wanted(&request) {
        match log_ws::take(request).await {
            Ok((upgrade, plain)) => (Some(upgrade), plain),
            Err(refused) => return refused,
        }
    } else {
        (None, request)
    };
    match (
        forward(request, &routed.host, routed.port, &target, tls).await,
        upgrade,
    ) {
        (Ok(r), Some(upgrade)) if r.status().is_success() => upgrade.answer(r.into_body()),
        (Ok(r), _) if sub == "log" && !r.status().is_success() => refused_log(r).await,
        (Ok(r), _) => r,
        (Err(e), _) => reply(
            500,
            "InternalError",
            format!(
                "error dialing backend: dial tcp {}:{}: {e}",
                routed.host, routed.port
            ),
        ),
    }
}

/// The value of query parameter `key`, if given.
fn value(query: &[(String, String)], key: &str) -> Option<String> {
    query.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// The kubelet's path and query for `pods/NAME/<sub>` with the client's `query`: the
/// API server's parameters in the kubelet's names (`stdin` → `input`, `ports` → one
/// `port` each); else the error to answer.
fn kubelet_target(
    sub: &str,
    namespace: &str,
    name: &str,
    query: &[(String, String)],
    routed: &Routed,
) -> Result<String, Response<Body>> {
    let container = || {
        routed
            .container
            .clone()
            .map_err(|message| reply(400, "BadRequest", message))
    };
    let mut kubelet_query: Vec<String> = Vec::new();
    let path = match sub {
        "log" => {
            let container = container()?;
            const PASSED: [&str; 7] = [
                "follow",
                "previous",
                "timestamps",
                "sinceSeconds",
                "sinceTime",
                "tailLines",
                "limitBytes",
            ];
            for (k, v) in query.iter().filter(|(k, _)| PASSED.contains(&k.as_str())) {
                kubelet_query.push(format!("{k}={}", encode(v)));
            }
            format!("/containerLogs/{namespace}/{name}/{container}")
        }
        "exec" | "attach" => {
            let container = container()?;
            streams_query(sub, query, &mut kubelet_query);
            format!("/{sub}/{namespace}/{name}/{container}")
        }
        "portforward" => {
            for (_, v) in query.iter().filter(|(k, _)| k == "ports" || k == "port") {
                for p in v.split(',') {
                    kubelet_query.push(format!("port={}", encode(p)));
                }
            }
            format!("/portForward/{namespace}/{name}")
        }
        other => {
            return Err(reply(
                404,
                "NotFound",
                format!("the server could not find the requested resource (pods/{other})"),
            ));
        }
    };
    Ok(if kubelet_query.is_empty() {
        path
    } else {
        format!("{path}?{}", kubelet_query.join("&"))
    })
}

/// exec's and attach's streams in the kubelet's names, and exec's command.
fn streams_query(sub: &str, query: &[(String, String)], out: &mut Vec<String>) {
    for (k, param) in [
        ("stdin", "input"),
        ("stdout", "output"),
        ("stderr", "error"),
        ("tty", "tty"),
    ] {
        if value(query, k).is_some_and(|v| truthy(&v)) {
            out.push(format!("{param}=1"));
        }
    }
    if sub == "exec" {
        for (_, v) in query.iter().filter(|(k, _)| k == "command") {
            out.push(format!("command={}", encode(v)));
        }
    }
}

/// A log the kubelet refuses comes back as a Status carrying the kubelet's words and
/// code, as the API server's response checker makes it.
async fn refused_log(r: Response<Body>) -> Response<Body> {
    let code = r.status().as_u16();
    let body = axum::body::to_bytes(r.into_body(), 64 << 10)
        .await
        .unwrap_or_default();
    let reason = match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        422 => "Invalid",
        _ => "InternalError",
    };
    reply(
        code,
        reason,
        String::from_utf8_lossy(&body).trim_end().to_owned(),
    )
}

/// Sends the client's request to the kubelet at `host:port` as `target`, over TLS with
/// the double's client certificate; an upgrade is carried both ways.
async fn forward(
    mut request: Request<Body>,
    host: &str,
    port: u16,
    target: &str,
    tls: Arc<rustls::ClientConfig>,
) -> Result<Response<Body>, String> {
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let server_name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let client_upgrade = hyper::upgrade::on(&mut request);
    let (parts, body) = request.into_parts();
    let mut to_kubelet = Request::builder()
        .method(parts.method.clone())
        .uri(target)
        .body(body)
        .map_err(|e| e.to_string())?;
    for (k, v) in &parts.headers {
        // The client's credentials are for the API server; the kubelet sees the API
        // server's certificate.
        if k == header::HOST || k == header::AUTHORIZATION {
            continue;
        }
        to_kubelet.headers_mut().append(k.clone(), v.clone());
    }
    if let Ok(h) = HeaderValue::from_str(&format!("{host}:{port}")) {
        to_kubelet.headers_mut().insert(header::HOST, h);
    }
    let mut answer = sender
        .send_request(to_kubelet)
        .await
        .map_err(|e| e.to_string())?;
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (parts, body) = answer.into_parts();
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    let kubelet_upgrade = hyper::upgrade::on(&mut answer);
    let mut reply = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for (k, v) in answer.headers() {
        reply = reply.header(k, v);
    }
    tokio::spawn(async move {
        let (Ok(client), Ok(kubelet)) = tokio::join!(client_upgrade, kubelet_upgrade) else {
            return;
        };
        let (mut cr, mut cw) = tokio::io::split(TokioIo::new(client));
        let (mut kr, mut kw) = tokio::io::split(TokioIo::new(kubelet));
        tokio::select! {
            _ = tokio::io::copy(&mut cr, &mut kw) => {}
            _ = async {
                let _ = tokio::io::copy(&mut kr, &mut cw).await;
                let _ = cw.shutdown().await;
            } => {}
        }
    });
    reply.body(Body::empty()).map_err(|e| e.to_string())
}

/// A TokenReview or SubjectAccessReview answered from the rules a test set.
pub(crate) fn review(sim: &ApiServerSim, resource: &str, body: &Value) -> Value {
    let spec = &body["spec"];
    match resource {
        "tokenreviews" => {
            let token = spec["token"].as_str().unwrap_or_default();
            let user = sim.token_user(token);
            let status = match user {
                Some((name, groups)) => serde_json::json!({
                    "authenticated": true,
                    "user": {"username": name, "groups": groups},
                }),
                None => {
                    serde_json::json!({"authenticated": false, "error": "invalid bearer token"})
                }
            };
            serde_json::json!({
                "kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": null}, "spec": spec, "status": status,
            })
        }
        _ => {
            let user = spec["user"].as_str().unwrap_or_default();
            let groups: Vec<&str> = spec["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let a = &spec["resourceAttributes"];
            let allowed = sim.allowed(
                user,
                &groups,
                a["verb"].as_str().unwrap_or_default(),
                a["resource"].as_str().unwrap_or_default(),
                a["subresource"].as_str().unwrap_or_default(),
            );
            serde_json::json!({
                "kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": null}, "spec": spec,
                "status": {"allowed": allowed, "reason": if allowed { "allowed by the double's rules" } else { "" }},
            })
        }
    }
}
