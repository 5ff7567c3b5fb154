//! The double's server: HTTP or HTTPS on loopback, each connection its own task, a
//! TLS connection's client certificate the identity of its requests.

use std::net::SocketAddr;

use axum::Router;

use crate::ca::ClusterCa;
use crate::http::handle;
use crate::sim::ApiServerSim;
use crate::tls;

/// A running server.
pub struct Served {
    /// Its address on loopback.
    pub addr: SocketAddr,
    pub(crate) https: bool,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// `http://127.0.0.1:<port>` (`https://` when served over TLS).
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops serving and drops every connection, as when an API server goes away (the
    /// store stays: serving again on the same address is the API server coming back).
    pub fn stop(self) {
        self.task.abort();
    }
}

impl ApiServerSim {
    /// Serves on `addr` (port 0: any free port).
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<Served> {
        self.serve_on(addr, None).await
    }

    /// Serves on `addr`, over TLS with `tls` (the client certificate of each
    /// connection, when verified, is who its requests come from).
    pub(crate) async fn serve_on(
        &self,
        addr: SocketAddr,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> std::io::Result<Served> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let app = Router::new().fallback(handle).with_state(self.clone());
        let https = tls.is_some();
        // Connections are this task's: stopping it drops them all, as a server that goes
        // away does.
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (app, tls) = (app.clone(), tls.clone());
                connections.spawn(async move {
                    let http = hyper::server::conn::http1::Builder::new();
                    let Some(tls) = tls else {
                        let service = hyper_util::service::TowerToHyperService::new(app);
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let _ = http.serve_connection(io, service).with_upgrades().await;
                        return;
                    };
                    let Ok(stream) = tls.accept(stream).await else {
                        return;
                    };
                    let peer = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(tls::certificate_identity);
                    let app = app.layer(axum::Extension(tls::PeerIdentity(peer)));
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = http.serve_connection(io, service).with_upgrades().await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Served { addr, https, task })
    }

    /// Serves over HTTPS on `addr` (port 0: any free port): the cluster CA's serving
    /// certificate, client certificates verified against it.
    pub async fn serve_tls(&self, addr: std::net::SocketAddr) -> std::io::Result<Served> {
        let config = self
            .cluster_ca()
            .and_then(ClusterCa::server_config)
            .map_err(std::io::Error::other)?;
        self.serve_on(addr, Some(tokio_rustls::TlsAcceptor::from(config)))
            .await
    }
}
