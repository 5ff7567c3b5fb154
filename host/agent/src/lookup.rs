//! What the agent says when an API object a pod needs cannot be had: a ConfigMap, a
//! Secret or a token its volumes project, the Services its environment names.

/// Any error an API client gives, kept as the source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An object a pod needs that could not be had.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The API server's answer to the request for `what` (`configmap "app"`, `token for
    /// service account "default"`).
    #[error("{what}: {source}")]
    Api {
        /// What was asked for.
        what: String,
        /// The answer.
        source: BoxError,
    },
    /// Not to be had yet, in the kubelet's words (Services never listed, an empty
    /// token).
    #[error("{0}")]
    Unavailable(String),
}
