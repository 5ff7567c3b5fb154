//! wasmlet's cluster mode: what joins a node agent to a Kubernetes API server.
//!
//! - [`connect`]: a client from a kubeconfig (token or client certificate, TLS verified
//!   against the cluster's CA), errors naming the file.
//! - [`node`]: registration (create the Node, or adopt one of the same name) and the
//!   node's status in the kubelet's words, sent as a merge PATCH to `nodes/NAME/status`.
//! - [`lease`]: the node's Lease in `kube-node-lease`, 40 s, renewed every 10 s, with
//!   back-off on conflicts and outages.
//!
//! Standalone mode (no kubeconfig) uses none of this.

pub mod connect;
pub mod lease;
pub mod node;

/// What went wrong talking to the API server.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The kubeconfig could not be read or used.
    #[error("{path}: {message}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The API server answered with an error, or could not be reached.
    #[error("{what}: {source}")]
    Api {
        /// What was being done ("registering node node-a").
        what: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}

impl ClusterError {
    pub(crate) fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ClusterError {
        let what = what.into();
        move |source| ClusterError::Api { what, source }
    }

    /// The API server's HTTP code, when it answered with an error.
    pub fn code(&self) -> Option<u16> {
        match self {
            ClusterError::Api {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }
}

/// RFC 3339 with microseconds, the API server's `MicroTime` form.
pub fn now_micro() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seconds = i64::try_from(nanos / 1_000_000_000).unwrap_or(0);
    let micros = (nanos % 1_000_000_000) / 1_000;
    let text = wasmlet_agent::time::rfc3339(seconds);
    format!("{}.{micros:06}Z", text.trim_end_matches('Z'))
}
