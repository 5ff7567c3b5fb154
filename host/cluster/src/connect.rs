//! A client for the API server named by a kubeconfig.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::ClusterError;

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
    kube::Client::try_from(config(path).await?).map_err(|e| ClusterError::Kubeconfig {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}
