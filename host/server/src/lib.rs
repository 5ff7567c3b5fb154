//! `wasmlet-server`: the kubelet server on port 10250 — what the API server proxies
//! `kubectl logs`, `exec`, `attach`, `port-forward` and `cp` to, behind the kubelet's
//! authentication and authorization.
//!
//! Start at [`start`]: it binds `address:port`, terminates TLS ([`tls`]), and for each
//! request authenticates ([`authn`]: client certificate, TokenReview, anonymous),
//! authorizes ([`authz`]: `nodes/<subresource>` through SubjectAccessReview, or
//! AlwaysAllow) and routes ([`routes`]). Then:
//! - [`logs`] — `containerLogs`: the CRI log format, every query parameter, follow.
//! - [`nodelogs`] — `/logs/`: the node's log directory, listed and read.
//! - [`proxy`] — exec, attach and port-forward carried to the runtime's streaming
//!   server (SPDY or WebSocket alike: the bytes after the upgrade are not read).
//! - [`review`] — TokenReview and SubjectAccessReview through kube.
//! - [`cache`] — the TTL cache both reviews answer from.
//! - [`stats`] — `/stats/summary`, `/metrics/resource`, `/metrics/cadvisor` from the
//!   node's latest usage sample.
//!
//! The seam into the agent is [`Parts`]: the running agent, its metrics as text, and the
//! configuration `/configz` shows.

pub mod authn;
pub mod authz;
pub mod cache;
#[cfg(any(test, feature = "testing"))]
pub mod dev;
pub mod logs;
pub mod nodelogs;
pub mod proxy;
pub mod review;
pub mod routes;
pub mod shared;
pub mod stats;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower::Service;
use wasmlet_agent::agent::Agent;
use wasmlet_cri::CriRuntime;

use crate::authn::{Authenticator, AuthnSettings, TokenReviewer, Unauthenticated, User};
use crate::authz::{AccessReviewer, Authorizer, AuthzSettings, Decision};
use crate::proxy::OpenStreams;
use crate::shared::{Shared, error};

/// The node's log directory the kubelet serves at `/logs/`.
pub const NODE_LOG_DIR: &str = "/var/log";

/// How the server is set up (the KubeletConfiguration's fields).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `address`:`port`.
    pub addr: SocketAddr,
    /// The node's name (the `nodes/<name>` every request is authorized against).
    pub node_name: String,
    /// `tlsCertFile`, `tlsPrivateKeyFile`, `tlsMinVersion`, `tlsCipherSuites`,
    /// `authentication.x509.clientCAFile`.
    pub tls: tls::TlsSettings,
    /// What a self-signed certificate is made for, when no certificate is given.
    pub self_signed: tls::SelfSigned,
    /// `authentication`.
    pub authn: AuthnSettings,
    /// `authorization`.
    pub authz: AuthzSettings,
    /// The node's log directory `/logs/` serves (the kubelet's is `/var/log`).
    pub node_log_dir: std::path::PathBuf,
}

/// What the server reads from the rest of the agent.
pub struct Parts<R> {
    /// The running agent.
    pub agent: Arc<Agent<R>>,
    /// `/metrics` as Prometheus text.
    pub metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// `/metrics/probes` as Prometheus text.
    pub probe_metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// What `/configz` shows (`kubeletconfig`).
    pub configz: serde_json::Value,
    /// TokenReview (cluster mode).
    pub tokens: Option<Arc<dyn TokenReviewer>>,
    /// SubjectAccessReview (cluster mode).
    pub access: Option<Arc<dyn AccessReviewer>>,
    /// The node's usage samples; `None`: `/stats/summary` and the usage metrics answer
    /// 404.
    pub stats: Option<Arc<wasmlet_stats::Stats>>,
}

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// TLS settings that cannot be used.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The address is taken or not ours.
    #[error("kubelet server: cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The running server.
pub struct Served {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Streams open through it (exec, attach, port-forward).
    pub open_streams: OpenStreams,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Stops accepting connections.
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// The user a connection's verified client certificate names.
#[derive(Clone, Default)]
struct Peer(Option<User>);

struct Guard {
    node: String,
    authn: Authenticator,
    authz: Authorizer,
}

/// Authentication and authorization of every request, the kubelet's way: 401
/// `Unauthorized`, 403 `Forbidden (user=…, verb=…, resource=nodes, subresource=…)`, or
/// 500 when the decision could not be made.
async fn guard(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<Peer>().and_then(|p| p.0.clone());
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let user = match g.authn.authenticate(peer.as_ref(), bearer).await {
        Ok(u) => u,
        Err(why) => {
            match why {
                Unauthenticated::ReviewFailed(e) => {
                    tracing::warn!("kubelet server: cannot authenticate a request: {e}");
                }
                other => {
                    tracing::debug!(?other, path = %req.uri().path(), "unauthenticated request")
                }
            }
            return error(StatusCode::UNAUTHORIZED, "Unauthorized");
        }
    };
    let attrs = authz::attributes(req.method().as_str(), req.uri().path(), &g.node);
    match g.authz.authorize(&user, &attrs).await {
        Decision::Allow => next.run(req).await,
        Decision::Deny => {
            tracing::info!(user = %user.name, verb = attrs.verb, subresource = attrs.subresource, "Forbidden");
            error(
                StatusCode::FORBIDDEN,
                authz::forbidden_message(&user, &attrs),
            )
        }
        Decision::Error(e) => {
            tracing::warn!("kubelet server: authorization error: {e}");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                authz::error_message(&user, &attrs),
            )
        }
    }
}

/// Binds `settings.addr` and serves until the returned [`Served`] is stopped.
pub async fn start<R: CriRuntime + 'static>(
    settings: Settings,
    parts: Parts<R>,
) -> Result<Served, ServerError> {
    let tls = tls::server_config(&settings.tls, &settings.self_signed)?;
    let listener =
        TcpListener::bind(settings.addr)
            .await
            .map_err(|source| ServerError::Listen {
                addr: settings.addr,
                source,
            })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ServerError::Listen {
            addr: settings.addr,
            source,
        })?;
    let open = OpenStreams::default();
    let mut authn = settings.authn.clone();
    authn.x509 = settings.tls.client_ca_file.is_some();
    let guard_state = Arc::new(Guard {
        node: settings.node_name.clone(),
        authn: Authenticator::new(authn, parts.tokens.clone()),
        authz: Authorizer::new(settings.authz.clone(), parts.access.clone()),
    });
    let shared = Arc::new(Shared {
        agent: parts.agent,
        metrics: parts.metrics,
        probe_metrics: parts.probe_metrics,
        configz: parts.configz,
        open: open.clone(),
        node_log_dir: settings.node_log_dir.clone(),
        stats: parts.stats,
    });
    let router =
        routes::router(shared).layer(axum::middleware::from_fn_with_state(guard_state, guard));
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tracing::info!(%addr, "kubelet server listening (HTTPS)");
    let task = tokio::spawn(accept_loop(listener, acceptor, router));
    Ok(Served {
        addr,
        open_streams: open,
        task,
    })
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: axum::Router,
) {
    loop {
        let (tcp, remote) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors and the like: wait a little rather than spin.
                tracing::warn!("kubelet server: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let router = router.clone();
        tokio::spawn(async move {
            let tls =
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%remote, "TLS handshake failed: {e}");
                        return;
                    }
                    Err(_) => return,
                };
            let peer = Peer(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(tls::certificate_user),
            );
            let service =
                hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer.clone());
                    let mut router = router.clone();
                    async move { router.call(req.map(axum::body::Body::new)).await }
                });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%remote, "kubelet server connection: {e}");
            }
        });
    }
}
