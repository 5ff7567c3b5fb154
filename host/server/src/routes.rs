//! The kubelet's paths: what each one reads from the agent and the runtime.

// Lookups answer with the response to send when they fail: built once per request, on
// the way out, so its size does not matter.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use k8s_openapi::api::core::v1 as k8s;
use wasmlet_agent::statuses::PodEntry;
use wasmlet_core::runtime::State as CState;
use wasmlet_cri::proto;
use wasmlet_cri::{CriRuntime, ErrorKind};

use crate::logs::{self, read};
use crate::proxy;
pub use crate::shared::{Shared, error, pairs};

fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The router of every path (authentication and authorization are layered on by the
/// caller).
pub fn router<R: CriRuntime + 'static>(shared: Arc<Shared<R>>) -> Router {
    Router::new()
        .route("/healthz", get(healthz::<R>))
        .route("/pods", get(pods::<R>))
        .route("/pods/", get(pods::<R>))
        .route("/runningpods/", get(running_pods::<R>))
        .route("/metrics", get(metrics::<R>))
        .route("/metrics/probes", get(probe_metrics::<R>))
        .route("/metrics/resource", get(crate::stats::resource::<R>))
        .route("/metrics/cadvisor", get(crate::stats::cadvisor::<R>))
        .route("/stats/summary", get(crate::stats::summary::<R>))
        .route("/configz", get(configz::<R>))
        .route(
            "/logs",
            get(|| async { axum::response::Redirect::permanent("logs/") }),
        )
        .route("/logs/", get(node_logs::<R>))
        .route("/logs/{*path}", get(node_logs::<R>))
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(container_logs::<R>),
        )
        // Each with the pod's UID or without it.
        .route("/exec/{namespace}/{pod}/{container}", any(exec::<R>))
        .route("/exec/{namespace}/{pod}/{uid}/{container}", any(exec::<R>))
        .route("/attach/{namespace}/{pod}/{container}", any(attach::<R>))
        .route(
            "/attach/{namespace}/{pod}/{uid}/{container}",
            any(attach::<R>),
        )
        .route("/portForward/{namespace}/{pod}", any(port_forward::<R>))
        .route(
            "/portForward/{namespace}/{pod}/{uid}",
            any(port_forward::<R>),
        )
        .route("/run/{namespace}/{pod}/{container}", post(run::<R>))
        .route("/run/{namespace}/{pod}/{uid}/{container}", post(run::<R>))
        .with_state(shared)
}

type St<R> = State<Arc<Shared<R>>>;

/// `/logs/…`: the node's log directory.
async fn node_logs<R: CriRuntime + 'static>(
    State(s): St<R>,
    path: Option<Path<String>>,
    uri: axum::http::Uri,
) -> Response {
    let rest = path.map(|Path(p)| p).unwrap_or_default();
    crate::nodelogs::serve(&s.node_log_dir, &rest, uri.path()).await
}

async fn healthz<R: CriRuntime + 'static>(State(s): St<R>) -> Response {
    match s.agent.health.check() {
        Ok(()) => "ok".into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn pods<R: CriRuntime + 'static>(State(s): St<R>) -> Response {
    let body = s.agent.ctx.statuses.pod_list_json();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `/runningpods/`: the pods the runtime runs, as a PodList of names, UIDs and running
/// containers (the kubelet's shape).
async fn running_pods<R: CriRuntime + 'static>(State(s): St<R>) -> Response {
    let mut items = Vec::new();
    for rt in s.agent.ctx.cache.all() {
        let containers: Vec<k8s::Container> = rt
            .running()
            .map(|c| k8s::Container {
                name: c.name.clone(),
                image: Some(c.image.clone()),
                ..Default::default()
            })
            .collect();
        if containers.is_empty() {
            continue;
        }
        items.push(k8s::Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(rt.name.clone()),
                namespace: Some(rt.namespace.clone()),
                uid: Some(rt.uid.clone()),
                ..Default::default()
            },
            spec: Some(k8s::PodSpec {
                containers,
                ..Default::default()
            }),
            status: None,
        });
    }
    json(&serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    }))
}

fn prometheus(text: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn metrics<R: CriRuntime + 'static>(State(s): St<R>) -> Response {
    prometheus((s.metrics)())
}

async fn probe_metrics<R: CriRuntime + 'static>(State(s): St<R>) -> Response {
    prometheus((s.probe_metrics)())
}

async fn configz<R: CriRuntime + 'static>(State(s): St<R>) -> Response {
    json(&serde_json::json!({ "kubeletconfig": s.configz }))
}

// ------------------------------------------------------------------ pods and containers

/// The pod `namespace/name`, or 404 naming it; with `uid`, it must be that pod.
fn find_pod<R: CriRuntime + 'static>(
    s: &Shared<R>,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<PodEntry, Response> {
    let entry = s.agent.ctx.statuses.find(namespace, name).ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            format!("pod \"{name}\" does not exist in namespace \"{namespace}\""),
        )
    })?;
    if let Some(uid) = uid
        && entry.pod.metadata.uid.as_deref() != Some(uid)
    {
        return Err(error(
            StatusCode::NOT_FOUND,
            format!("pod \"{name}\" with UID {uid} does not exist in namespace \"{namespace}\""),
        ));
    }
    Ok(entry)
}

fn spec_names(pod: &k8s::Pod) -> Vec<&str> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let mut names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    names.extend(
        spec.init_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str()),
    );
    names.extend(
        spec.ephemeral_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str()),
    );
    names
}

fn check_container(entry: &PodEntry, container: &str) -> Result<(), Response> {
    if spec_names(&entry.pod).contains(&container) {
        return Ok(());
    }
    let pod = entry.pod.metadata.name.as_deref().unwrap_or_default();
    Err(error(
        StatusCode::NOT_FOUND,
        format!("container \"{container}\" not found in pod \"{pod}\""),
    ))
}

fn strip_scheme(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, id)| id)
}

/// The container whose log a request reads, from the pod's status, the kubelet's way:
/// the running or last terminated instance, or with `previous` the one before.
fn log_container(entry: &PodEntry, container: &str, previous: bool) -> Result<String, Response> {
    let pod = entry.pod.metadata.name.as_deref().unwrap_or_default();
    let st = &entry.status;
    let status = st
        .container_statuses
        .iter()
        .flatten()
        .chain(st.init_container_statuses.iter().flatten())
        .chain(st.ephemeral_container_statuses.iter().flatten())
        .find(|c| c.name == container);
    let Some(status) = status else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            format!(
                "container \"{container}\" in pod \"{pod}\" is waiting to start: ContainerCreating"
            ),
        ));
    };
    let last = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .and_then(|t| t.container_id.as_deref())
        .filter(|id| !id.is_empty());
    if previous {
        return last.map(|id| strip_scheme(id).to_owned()).ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                format!("previous terminated container \"{container}\" in pod \"{pod}\" not found"),
            )
        });
    }
    let state = status.state.clone().unwrap_or_default();
    if state.running.is_some() || state.terminated.is_some() {
        let id = status
            .container_id
            .as_deref()
            .or(state
                .terminated
                .as_ref()
                .and_then(|t| t.container_id.as_deref()))
            .filter(|id| !id.is_empty());
        if let Some(id) = id {
            return Ok(strip_scheme(id).to_owned());
        }
    }
    if let Some(id) = last {
        return Ok(strip_scheme(id).to_owned());
    }
    let reason = state
        .waiting
        .and_then(|w| w.reason)
        .unwrap_or_else(|| "ContainerCreating".into());
    Err(error(
        StatusCode::BAD_REQUEST,
        format!("container \"{container}\" in pod \"{pod}\" is waiting to start: {reason}"),
    ))
}

fn cri_error(e: &wasmlet_cri::CriError) -> Response {
    let code = match e.kind() {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::InvalidArgument => StatusCode::BAD_REQUEST,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(code, e.to_string())
}

// ------------------------------------------------------------------ logs

/// Hands chunks to the response body; the body's end tells when the client is gone.
struct BodySink {
    tx: tokio::sync::mpsc::Sender<Bytes>,
    running: Box<dyn Fn() -> bool + Send>,
}

impl read::Sink for BodySink {
    fn write(&mut self, chunk: Vec<u8>) -> bool {
        self.tx.blocking_send(Bytes::from(chunk)).is_ok()
    }
    fn closed(&self) -> bool {
        self.tx.is_closed()
    }
    fn running(&self) -> bool {
        (self.running)()
    }
}

async fn container_logs<R: CriRuntime + 'static>(
    State(s): St<R>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    let now = s.agent.ctx.clock.unix_nanos();
    let opts = match logs::query(&pairs(query.as_deref()), now) {
        Ok(o) => o,
        Err(e @ logs::QueryError::Malformed { .. }) => {
            return error(StatusCode::BAD_REQUEST, e.to_string());
        }
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    };
    let entry = match find_pod(&s, &namespace, &pod, None) {
        Ok(e) => e,
        Err(r) => return r,
    };
    if let Err(r) = check_container(&entry, &container) {
        return r;
    }
    let id = match log_container(&entry, &container, opts.previous) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let path = match s.agent.ctx.runtime.container_status(&id, false).await {
        Ok(st) => st.status.map(|c| c.log_path).unwrap_or_default(),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "container \"{container}\" in pod \"{pod}\": the container {id} is gone from the runtime, and its log with it"
                ),
            );
        }
        Err(e) => return cri_error(&e),
    };
    if path.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            format!("container \"{container}\" in pod \"{pod}\" has no log file"),
        );
    }
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("failed to open log file \"{path}\": {e}"),
            );
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let cache = s.agent.ctx.cache.clone();
    let uid = entry.pod.metadata.uid.clone().unwrap_or_default();
    let cid = id.clone();
    let running = Box::new(move || {
        cache.get(&uid).is_some_and(|rt| {
            rt.containers
                .iter()
                .any(|c| c.id == cid && c.state == CState::Running)
        })
    });
    tokio::task::spawn_blocking(move || {
        let mut sink = BodySink { tx, running };
        if let Err(e) = read::read(std::path::Path::new(&path), file, &opts, &mut sink) {
            tracing::warn!("containerLogs: {e}");
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        Body::from_stream(stream),
    )
        .into_response()
}

// ------------------------------------------------------------------ exec, attach, port-forward, run

/// `stdin`, `stdout`, `stderr`, `tty` and `command` of an exec or attach request.
#[derive(Debug, Default)]
struct StreamQuery {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
    command: Vec<String>,
}

fn flag(v: &str) -> bool {
    matches!(v, "1" | "true" | "True" | "TRUE" | "t")
}

fn stream_query(query: Option<&str>) -> Result<StreamQuery, Response> {
    let mut q = StreamQuery::default();
    for (k, v) in pairs(query) {
        match k.as_str() {
            "stdin" | "input" => q.stdin = flag(&v),
            "stdout" | "output" => q.stdout = flag(&v),
            "stderr" | "error" => q.stderr = flag(&v),
            "tty" => q.tty = flag(&v),
            "command" => q.command.push(v),
            _ => {}
        }
    }
    // A terminal carries both outputs: stderr is folded into it, as the kubelet does.
    if q.tty {
        q.stderr = false;
    }
    if !(q.stdin || q.stdout || q.stderr) {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    Ok(q)
}

/// The running container `name` of the pod, or why not.
fn running_container<R: CriRuntime + 'static>(
    s: &Shared<R>,
    entry: &PodEntry,
    name: &str,
) -> Result<String, Response> {
    check_container(entry, name)?;
    let uid = entry.pod.metadata.uid.as_deref().unwrap_or_default();
    let pod = entry.pod.metadata.name.as_deref().unwrap_or_default();
    s.agent
        .ctx
        .cache
        .get(uid)
        .and_then(|rt| {
            rt.containers
                .iter()
                .find(|c| c.name == name && c.state == CState::Running)
                .map(|c| c.id.clone())
        })
        .ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                format!("container \"{name}\" in pod \"{pod}\" is not running"),
            )
        })
}

async fn upgrade<R: CriRuntime + 'static>(s: &Shared<R>, req: Request, url: String) -> Response {
    let runtime = s
        .agent
        .ctx
        .runtime_name
        .get()
        .cloned()
        .unwrap_or_else(|| "container runtime".into());
    match proxy::forward(req, &url, &runtime, &s.open).await {
        Ok(r) => r,
        Err(e @ proxy::ProxyError::Unreachable { .. }) => {
            error(StatusCode::BAD_GATEWAY, e.to_string())
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exec,
    Attach,
}

async fn exec_or_attach<R: CriRuntime + 'static>(
    s: Arc<Shared<R>>,
    kind: Kind,
    ContainerPath {
        namespace,
        pod,
        uid,
        container,
    }: ContainerPath,
    req: Request,
) -> Response {
    let q = match stream_query(req.uri().query()) {
        Ok(q) => q,
        Err(r) => return r,
    };
    let entry = match find_pod(&s, &namespace, &pod, uid.as_deref()) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let id = match running_container(&s, &entry, &container) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let answer = match kind {
        Kind::Exec => {
            if q.command.is_empty() {
                return error(StatusCode::BAD_REQUEST, "command: at least one is required");
            }
            s.agent
                .ctx
                .runtime
                .exec(proto::ExecRequest {
                    container_id: id,
                    cmd: q.command,
                    tty: q.tty,
                    stdin: q.stdin,
                    stdout: q.stdout,
                    stderr: q.stderr,
                })
                .await
        }
        Kind::Attach => {
            s.agent
                .ctx
                .runtime
                .attach(proto::AttachRequest {
                    container_id: id,
                    stdin: q.stdin,
                    tty: q.tty,
                    stdout: q.stdout,
                    stderr: q.stderr,
                })
                .await
        }
    };
    match answer {
        Ok(url) => upgrade(&s, req, url).await,
        Err(e) => cri_error(&e),
    }
}

/// A path naming a container: `{namespace}/{pod}[/{uid}]/{container}`.
#[derive(Debug, serde::Deserialize)]
struct ContainerPath {
    namespace: String,
    pod: String,
    uid: Option<String>,
    container: String,
}

/// A path naming a pod: `{namespace}/{pod}[/{uid}]`.
#[derive(Debug, serde::Deserialize)]
struct PodPath {
    namespace: String,
    pod: String,
    uid: Option<String>,
}

async fn exec<R: CriRuntime + 'static>(
    State(s): St<R>,
    Path(p): Path<ContainerPath>,
    req: Request,
) -> Response {
    exec_or_attach(s, Kind::Exec, p, req).await
}

async fn attach<R: CriRuntime + 'static>(
    State(s): St<R>,
    Path(p): Path<ContainerPath>,
    req: Request,
) -> Response {
    exec_or_attach(s, Kind::Attach, p, req).await
}

/// The `port` query parameters (repeated, or comma-separated), each 1 to 65535.
fn ports(query: Option<&str>) -> Result<Vec<i32>, Response> {
    let mut out = Vec::new();
    for (k, v) in pairs(query) {
        if k != "port" {
            continue;
        }
        for p in v.split(',') {
            match p.trim().parse::<u16>() {
                Ok(n) if n > 0 => out.push(i32::from(n)),
                _ => {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        format!("port: {p:?} is not a valid port (1 to 65535)"),
                    ));
                }
            }
        }
    }
    Ok(out)
}

async fn port_forward<R: CriRuntime + 'static>(
    State(s): St<R>,
    Path(PodPath {
        namespace,
        pod,
        uid,
    }): Path<PodPath>,
    req: Request,
) -> Response {
    let ports = match ports(req.uri().query()) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let entry = match find_pod(&s, &namespace, &pod, uid.as_deref()) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let pod_uid = entry.pod.metadata.uid.as_deref().unwrap_or_default();
    let sandbox = s
        .agent
        .ctx
        .cache
        .get(pod_uid)
        .and_then(|rt| rt.sandbox().filter(|sb| sb.ready).map(|sb| sb.id.clone()));
    let Some(sandbox) = sandbox else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("pod \"{pod}\" has no running sandbox to forward ports into"),
        );
    };
    match s.agent.ctx.runtime.port_forward(&sandbox, ports).await {
        Ok(url) => upgrade(&s, req, url).await,
        Err(e) => cri_error(&e),
    }
}

/// `POST /run/…?cmd=…`: runs a command to completion (ExecSync) and answers with its
/// output, stdout then stderr.
async fn run<R: CriRuntime + 'static>(
    State(s): St<R>,
    Path(ContainerPath {
        namespace,
        pod,
        uid,
        container,
    }): Path<ContainerPath>,
    RawQuery(query): RawQuery,
) -> Response {
    let q = pairs(query.as_deref());
    let Some(cmd) = q.iter().find(|(k, _)| k == "cmd").map(|(_, v)| v.clone()) else {
        return error(StatusCode::BAD_REQUEST, "cmd: a command is required");
    };
    let entry = match find_pod(&s, &namespace, &pod, uid.as_deref()) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let id = match running_container(&s, &entry, &container) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let argv: Vec<String> = cmd.split(' ').map(str::to_owned).collect();
    match s
        .agent
        .ctx
        .runtime
        .exec_sync(&id, argv, std::time::Duration::ZERO)
        .await
    {
        Ok(r) => {
            let mut out = r.stdout;
            out.extend_from_slice(&r.stderr);
            if r.exit_code != 0 {
                let mut msg = String::from_utf8_lossy(&out).into_owned();
                msg.push_str(&format!("command '{cmd}' exited with {}", r.exit_code));
                return error(StatusCode::INTERNAL_SERVER_ERROR, msg);
            }
            out.into_response()
        }
        Err(e) => cri_error(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_percent_decoded() {
        assert_eq!(
            pairs(Some("command=sh&command=-c&command=echo%20a%2Bb+c&tty=1")),
            vec![
                ("command".to_owned(), "sh".to_owned()),
                ("command".to_owned(), "-c".to_owned()),
                ("command".to_owned(), "echo a+b c".to_owned()),
                ("tty".to_owned(), "1".to_owned()),
            ]
        );
        assert_eq!(
            pairs(Some("a=100%&b=%zz")),
            vec![
                ("a".to_owned(), "100%".to_owned()),
                ("b".to_owned(), "%zz".to_owned()),
            ]
        );
    }

    #[test]
    fn stream_queries_need_a_stream_and_fold_stderr_into_a_tty() {
        let q = stream_query(Some("stdout=1&stderr=1&tty=1&command=sh")).expect("ok");
        assert!(q.stdout && q.tty && !q.stderr);
        assert!(stream_query(Some("command=ls")).is_err());
        assert_eq!(
            ports(Some("port=80&port=8080,9090")).ok(),
            Some(vec![80, 8080, 9090])
        );
        assert!(ports(Some("port=0")).is_err());
        assert!(ports(Some("port=http")).is_err());
    }
}
