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
//! A node checks before it loads ([`Verifier`]), as its configuration asks
//! ([`Verification`]): with `required`, a component no trusted key signed is refused and
//! the reason named; without, the signer is recorded when there is one.
//!
//! The formats and the cryptography are sigstore-rs' (the crate Kubewarden verifies
//! policies with); this crate decides what is looked up, against which keys, and what
//! is said when it does not verify.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use sigstore::crypto::{CosignVerificationKey, Signature};

pub mod keys;
pub mod oci;

pub use oci::Registry;
/// The OCI client artifacts are read with (its `Reference`, `Client`, `RegistryAuth`).
pub use oci_client;
/// A private key that signs (from [`keys::signer`]).
pub use sigstore::crypto::SigStoreSigner as Signer;

/// The `verification:` section of `clusterPlugins` and `plugins`.
///
/// ```yaml
/// verification:
///   publicKeys: [/etc/wasmlet/keys/release.pub]   # cosign public keys (PEM)
///   required: true                                # refuse what none of them signed
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Verification {
    /// The keys a component may be signed with (PEM public keys, as `cosign
    /// generate-key-pair` writes `cosign.pub`).
    #[serde(default)]
    pub public_keys: Vec<PathBuf>,
    /// Refuse a component none of the keys signed. Without it a signature is checked
    /// and recorded when there is one, and an unsigned component still loads.
    #[serde(default)]
    pub required: bool,
}

impl Verification {
    /// Checks the values; the error names the field below `verification`.
    pub fn validate(&self) -> Result<(), String> {
        if self.required && self.public_keys.is_empty() {
            return Err(
                "required: true needs at least one key in publicKeys (nothing could verify)".into(),
            );
        }
        for (i, p) in self.public_keys.iter().enumerate() {
            if !p.is_absolute() {
                return Err(format!(
                    "publicKeys[{i}]: {} is not an absolute path",
                    p.display()
                ));
            }
        }
        Ok(())
    }

    /// Whether anything is to be checked.
    pub fn enabled(&self) -> bool {
        !self.public_keys.is_empty()
    }
}

/// A key components may be signed with.
#[derive(Debug)]
struct TrustedKey {
    /// `sha256:` and the first 16 hex digits of the sha256 of its DER form: how
    /// statuses and events name it (the same on every node, whatever the file is
    /// called there).
    id: String,
    key: CosignVerificationKey,
}

/// Who signed a component, once verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The key's id (`sha256:` and 16 hex digits of its DER form's digest).
    pub key: String,
}

/// Checks signatures against a node's trusted keys.
#[derive(Debug)]
pub struct Verifier {
    keys: Vec<TrustedKey>,
    required: bool,
    fingerprint: String,
}

/// The id of a public key: `sha256:` and the first 16 hex digits of its DER form's
/// sha256.
pub fn key_id(der: &[u8]) -> String {
    format!("sha256:{}", &format!("{:x}", Sha256::digest(der))[..16])
}

impl Verifier {
    /// The verifier `config` describes, its keys read; `None` when it asks for nothing.
    /// The error names the key file and what is wrong with it.
    pub fn load(config: &Verification) -> Result<Option<Self>, String> {
        config.validate()?;
        if !config.enabled() {
            return Ok(None);
        }
        let mut keys = Vec::new();
        for path in &config.public_keys {
            keys.push(read_key(path)?);
        }
        let mut ids: Vec<&str> = keys.iter().map(|k| k.id.as_str()).collect();
        ids.sort_unstable();
        let fingerprint = format!("required={} keys={}", config.required, ids.join(","));
        Ok(Some(Self {
            keys,
            required: config.required,
            fingerprint,
        }))
    }

    /// Whether a component no key signed is refused.
    pub fn required(&self) -> bool {
        self.required
    }

    /// What the verifier trusts, as one line: a component verified under another
    /// fingerprint is verified again.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The ids of the trusted keys, for messages.
    fn key_ids(&self) -> String {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        ids.join(", ")
    }

    /// Verifies a blob signature (base64, as `cosign sign-blob` prints it) of `bytes`.
    pub fn verify_blob(&self, bytes: &[u8], signature: &str) -> Result<Verified, String> {
        let signature = signature.trim();
        self.keys
            .iter()
            .find(|k| {
                k.key
                    .verify_signature(Signature::Base64Encoded(signature.as_bytes()), bytes)
                    .is_ok()
            })
            .map(|k| Verified { key: k.id.clone() })
            .ok_or_else(|| {
                format!(
                    "the signature does not verify with any trusted key ({})",
                    self.key_ids()
                )
            })
    }
}

/// Reads a PEM public key; the error names the file.
fn read_key(path: &Path) -> Result<TrustedKey, String> {
    let pem = std::fs::read(path).map_err(|e| format!("publicKeys: {}: {e}", path.display()))?;
    let bad = |e: &dyn std::fmt::Display| {
        format!(
            "publicKeys: {}: not a PEM public key cosign could verify with ({e})",
            path.display()
        )
    };
    let key = CosignVerificationKey::try_from_pem(&pem).map_err(|e| bad(&e))?;
    let der = keys::pem_contents(&pem).map_err(|e| bad(&e))?;
    Ok(TrustedKey {
        id: key_id(&der),
        key,
    })
}

#[cfg(test)]
mod tests;
