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
