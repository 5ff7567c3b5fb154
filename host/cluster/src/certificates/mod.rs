//! The node's credentials from the cluster, as the kubelet gets them: TLS bootstrap of
//! its client certificate ([`bootstrap`]), rotation before expiry ([`rotation`]), a
//! client that picks up the new certificate without a restart ([`client`]), and the
//! serving certificate signed by the cluster. Each certificate comes through the
//! CertificateSigningRequest API ([`csr`]) and is kept on disk as the kubelet keeps it
//! ([`store`]).

pub mod bootstrap;
pub mod client;
pub mod csr;
pub mod rotation;
pub mod store;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// What the kubelet's certificate manager does with kubeadm's `kubelet.conf` of a
/// control-plane node (a client certificate written into the file, and an empty store):
/// the certificate is stored as the first `kubelet-client-<timestamp>.pem` with
/// `kubelet-client-current.pem` pointing at it, and is to be renewed through a CSR at
/// once. kubeadm's kubelet-finalize phase then points `kubelet.conf` at the current file,
/// so the node's identity rotates from then on. `in_use` is the certificate the
/// kubeconfig holds ([`bootstrap::kubeconfig_certificate`]). Returns the stored pair,
/// `None` when the store has a pair already or the kubeconfig refers to files.
pub fn adopt_embedded(
    kubeconfig: &std::path::Path,
    in_use: Option<&store::Pair>,
    store: &store::Store,
) -> Result<Option<store::Pair>, CertError> {
    let Some(pair) = in_use else {
        return Ok(None);
    };
    if store.current().is_some() || !bootstrap::embeds_certificate(kubeconfig) {
        return Ok(None);
    }
    let stored = store.save(&pair.cert_pem, &pair.key_pem)?;
    tracing::info!(
        cert = %store.current_path().display(),
        "the kubeconfig's client certificate is stored; a new one is requested now"
    );
    Ok(Some(stored))
}

/// A client for the API server `kubeconfig` names whose client certificate is kept
/// renewed: it starts with `pair`, and a [`rotation::Rotation`] of `store` (with
/// `fallback`, the kubeconfig's own certificate, while the store has none; renewing at
/// once with `renew_now`) hands each new one to it until `stop`.
pub async fn rotating_client(
    kubeconfig: &std::path::Path,
    pair: &store::Pair,
    store: store::Store,
    node: &str,
    fallback: Option<store::Pair>,
    renew_now: bool,
    stop: CancellationToken,
) -> Result<kube::Client, CertError> {
    let (client, rotating) = client::client(kubeconfig, pair).await?;
    rotation::Rotation {
        store,
        request: csr::Request::client(node),
        publish: std::sync::Arc::new(move |p| {
            if let Err(e) = rotating.set(p) {
                tracing::warn!("rotated client certificate not used: {e}");
            }
        }),
        fallback,
        renew_now,
    }
    .spawn(client.clone(), stop);
    Ok(client)
}

impl From<crate::error::ClusterError> for CertError {
    fn from(e: crate::error::ClusterError) -> Self {
        match e {
            crate::error::ClusterError::Kubeconfig { path, message } => {
                CertError::Kubeconfig { path, message }
            }
            other => CertError::Api(other.to_string()),
        }
    }
}

/// Why a certificate could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A kubeconfig could not be read or used.
    #[error("{path}: {message}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The API server refused or failed a request.
    #[error("{0}")]
    Api(String),
    /// The CSR was denied or failed.
    #[error("CSR {csr} was refused ({reason}): {message}")]
    Refused {
        /// The CSR's name.
        csr: String,
        /// `Denied: <reason>` or `Failed: <reason>`.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// Nobody issued the CSR in time.
    #[error("CSR {csr} was not issued within {after:?}")]
    Timeout {
        /// The CSR's name.
        csr: String,
        /// How long it was waited for.
        after: Duration,
    },
    /// A certificate, key or request that does not parse.
    #[error("{0}")]
    Invalid(String),
    /// The certificate directory could not be written.
    #[error("{dir}: {message}")]
    Store {
        /// The directory or file.
        dir: String,
        /// Why.
        message: String,
    },
}
