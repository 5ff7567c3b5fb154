//! [`ClusterError`]: what went wrong talking to the API server.

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
