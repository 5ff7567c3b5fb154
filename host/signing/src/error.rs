//! What the crate says when a verification configuration cannot be used
//! ([`ConfigError`]), a signature is refused ([`VerifyError`]) or a registry does not
//! take one ([`RegistryError`]).

/// A `verification:` value that cannot be used: the field below `verification`
/// (`publicKeys[0]`, `keyless.identities[1].subjectRegExp`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// The field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error, its field below `parent`.
    pub fn under(mut self, parent: &str) -> Self {
        self.field = format!("{parent}.{}", self.field);
        self
    }
}

/// Why a component's signature is refused; each says what was found instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// No signature where one should be.
    #[error("not signed: {0}")]
    NotSigned(String),
    /// Signed, but by no key or identity the node trusts (or not these bytes).
    #[error("{0}")]
    Untrusted(String),
    /// The signature cannot be read.
    #[error("{0}")]
    Malformed(String),
    /// The registry could not be asked for the artifact's signatures.
    #[error("looking up the signatures of {artifact}: {message}")]
    Lookup {
        /// `REGISTRY/REPO@sha256:…`.
        artifact: String,
        /// What went wrong.
        message: String,
    },
}

/// An artifact a registry could not resolve, or a signature it would not store.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The reference does not parse.
    #[error("{reference}: not an OCI reference: {source}")]
    Reference {
        /// As given.
        reference: String,
        /// Why.
        source: oci_client::ParseError,
    },
    /// The registry did not answer with the tag's manifest digest.
    #[error("{reference}: {source}")]
    Digest {
        /// The artifact.
        reference: String,
        /// The registry's answer.
        source: oci_client::errors::OciDistributionError,
    },
    /// The signature could not be stored beside the artifact.
    #[error("storing the signature as {target}: {source}")]
    Store {
        /// Where it was to go (`REPO:sha256-<hex>.sig`).
        target: String,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The payload could not be signed.
    #[error(transparent)]
    Sign(#[from] crate::keys::KeyError),
}
