//! A client for the API server named by a kubeconfig.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::error::ClusterError;

/// Makes ring the process's TLS provider, once. kube's client asks rustls for the
/// process's provider; with two compiled in (ring, which the workspace names, and
/// aws-lc-rs, which sigstore's crypto brings) rustls will not choose, so every process
/// that makes a kube client says which.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The client configuration of the kubeconfig at `path` (its current context).
pub async fn config(path: &Path) -> Result<kube::Config, ClusterError> {
    let bad = |message: String| ClusterError::Kubeconfig {
        path: path.display().to_string(),
        message,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))
}

/// A client from the kubeconfig at `path` (its current context): token or client
/// certificate auth, TLS verified against the cluster's CA as the file says.
pub async fn client(path: &Path) -> Result<kube::Client, ClusterError> {
    install_crypto_provider();
    kube::Client::try_from(config(path).await?).map_err(|e| ClusterError::Kubeconfig {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}
