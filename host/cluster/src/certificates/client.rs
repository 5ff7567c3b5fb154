//! A client whose certificate can change while it runs. Every new connection presents
//! the current identity (`RotatingIdentity`); when it changes, the connection pool is
//! replaced ([`Rotating::set`]): requests from then on go over new connections with the
//! new certificate, while requests in flight — the node's watches — finish on the
//! connections they started on. The API server authenticates each request with its
//! connection's certificate (an expired one gets 401), so no request is sent over a
//! connection whose certificate could expire, and no watch is broken to get there.

use std::path::Path;
use std::sync::{Arc, RwLock};

use hyper_util::client::legacy::connect::HttpConnector;
use kube::client::ConfigExt;
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;

use super::CertError;
use super::store::Pair;

/// The client certificate new connections present.
#[derive(Debug)]
struct RotatingIdentity {
    current: RwLock<Arc<CertifiedKey>>,
}

impl RotatingIdentity {
    /// Starts with `pair`.
    fn new(pair: &Pair) -> Result<Arc<Self>, CertError> {
        let key = pair.certified_key()?;
        Ok(Arc::new(RotatingIdentity {
            current: RwLock::new(Arc::new(key)),
        }))
    }

    /// From now on, new connections present `pair`.
    fn set(&self, pair: &Pair) -> Result<(), CertError> {
        let key = pair.certified_key()?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
        Ok(())
    }

    fn get(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ResolvesClientCert for RotatingIdentity {
    fn resolve(
        &self,
        _issuers: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

type Hyper = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<HttpConnector>,
    kube::client::Body,
>;

/// The HTTP client requests go through, replaced at each rotation.
#[derive(Clone)]
struct Pool {
    current: Arc<RwLock<Hyper>>,
    make: Arc<dyn Fn() -> Hyper + Send + Sync>,
}

impl tower::Service<http::Request<kube::client::Body>> for Pool {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let hyper = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        hyper.request(request)
    }
}

/// A client's identity and its connections, rotated together.
#[derive(Clone)]
pub struct Rotating {
    identity: Arc<RotatingIdentity>,
    pool: Pool,
}

impl Rotating {
    /// From now on, requests go over new connections presenting `pair`.
    pub fn set(&self, pair: &Pair) -> Result<(), CertError> {
        self.identity.set(pair)?;
        let fresh = (self.pool.make)();
        *self.pool.current.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }
}

/// A client for the API server `kubeconfig` names that authenticates with `pair`, and
/// the handle that rotates it.
pub async fn client(kubeconfig: &Path, pair: &Pair) -> Result<(kube::Client, Rotating), CertError> {
    let identity = RotatingIdentity::new(pair)?;
    let bad = |message: String| CertError::Kubeconfig {
        path: kubeconfig.display().to_string(),
        message,
    };
    let config = crate::connect::config(kubeconfig).await?;
    crate::connect::install_crypto_provider();
    let mut tls = config
        .rustls_client_config()
        .map_err(|e| bad(e.to_string()))?;
    tls.client_auth_cert_resolver = identity.clone();
    // A resumed session would carry the identity it was made with, not the current one
    // (client-go keeps no session cache either).
    tls.resumption = rustls::client::Resumption::disabled();
    let connect_timeout = config.connect_timeout;
    let make = Arc::new(move || -> Hyper {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(connect_timeout);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https)
    });
    let pool = Pool {
        current: Arc::new(RwLock::new(make())),
        make,
    };
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(|e| bad(e.to_string()))?)
        .layer(
            config
                .extra_headers_layer()
                .map_err(|e| bad(e.to_string()))?,
        )
        .map_err(|e: hyper_util::client::legacy::Error| -> tower::BoxError { Box::new(e) })
        .service(pool.clone());
    let client = kube::Client::new(service, config.default_namespace);
    Ok((client, Rotating { identity, pool }))
}
