//! Signed plugin components.
//!
//! A component is signed the way cosign signs a container image: for an artifact in an
//! OCI registry, a "simple signing" payload naming the artifact's manifest digest, signed
//! with the publisher's key and stored beside it under cosign's tag
//! (`REPO:sha256-<hex>.sig`), so `cosign verify --key` accepts it and this crate accepts
//! what `cosign sign --key` made; for a file (the node's own plugin directory, a
//! ConfigMap), the signature of its bytes, base64, as `cosign sign-blob` writes it, in
//! `FILE.sig`. Keys are cosign's: `cosign.key` (encrypted with `COSIGN_PASSWORD`) and
//! `cosign.pub`.
//!
//! Or keyless, as `cosign sign` signs without `--key`: a Fulcio certificate naming the
//! signer and a Rekor bundle beside the signature (annotations of the signature layer;
//! for a file, the `cosign sign-blob --bundle` JSON in `FILE.sig`), checked offline
//! against a trusted root file and the identities a node trusts ([`keyless`]). Cosign
//! 3's Sigstore bundles — stored as OCI referrers of the artifact, or a file's
//! `FILE.sig` — are read too ([`bundle`]).
//!
//! A node checks before it loads ([`Verifier`]), as its configuration asks
//! ([`Verification`]): with `required`, a component no trusted key or identity signed
//! is refused and the reason named; without, the signer is recorded when there is one.
//!
//! The formats and the cryptography are sigstore-rs' (the crate Kubewarden verifies
//! policies with); this crate decides what is looked up, against which keys, and what
//! is said when it does not verify.

mod blob;
pub mod bundle;
mod error;
pub mod keyless;
pub mod keys;
pub mod oci;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod verify;

pub use error::{ConfigError, RegistryError, VerifyError};
pub use oci::Registry;
/// The OCI client artifacts are read with (its `Reference`, `Client`, `RegistryAuth`).
pub use oci_client;
/// A private key that signs (from [`keys::signer`]).
pub use sigstore::crypto::SigStoreSigner as Signer;
pub use verify::{Verification, Verified, Verifier, describe_signer, key_id};

#[cfg(test)]
mod tests;
