//! A client whose certificate can change while it runs: every new connection presents
//! the current identity ([`RotatingIdentity`]); connections already open (the node's
//! watches) carry on with the one they were opened with until the server closes them.

use std::path::Path;
use std::sync::{Arc, RwLock};

use hyper_util::client::legacy::connect::HttpConnector;
use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;

use super::CertError;
use super::store::Pair;

/// The client certificate new connections present.
#[derive(Debug)]
pub struct RotatingIdentity {
    current: RwLock<Arc<CertifiedKey>>,
}

impl RotatingIdentity {
    /// Starts with `pair`.
    pub fn new(pair: &Pair) -> Result<Arc<Self>, CertError> {
        let key = pair.certified_key().map_err(CertError::Invalid)?;
        Ok(Arc::new(RotatingIdentity {
            current: RwLock::new(Arc::new(key)),
        }))
    }

    /// From now on, new connections present `pair`.
    pub fn set(&self, pair: &Pair) -> Result<(), CertError> {
        let key = pair.certified_key().map_err(CertError::Invalid)?;
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

/// A client for the API server `kubeconfig` names that authenticates with `identity`.
pub async fn client(
    kubeconfig: &Path,
    identity: Arc<RotatingIdentity>,
) -> Result<kube::Client, CertError> {
    let bad = |message: String| CertError::Kubeconfig {
        path: kubeconfig.display().to_string(),
        message,
    };
    let file = Kubeconfig::read_from(kubeconfig).map_err(|e| bad(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    let mut tls = config
        .rustls_client_config()
        .map_err(|e| bad(e.to_string()))?;
    tls.client_auth_cert_resolver = identity;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(|e| bad(e.to_string()))?)
        .layer(
            config
                .extra_headers_layer()
                .map_err(|e| bad(e.to_string()))?,
        )
        .map_err(|e: hyper_util::client::legacy::Error| -> tower::BoxError { Box::new(e) })
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace))
}
