//! What a node trusts ([`Verification`]) and the check it makes before it loads a
//! component ([`Verifier`]).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use sigstore::crypto::{CosignVerificationKey, Signature};

use crate::error::ConfigError;
use crate::{keyless, keys, oci};

/// The `verification:` section of `clusterPlugins` and `plugins`.
///
/// ```yaml
/// verification:
///   publicKeys: [/etc/wasmlet/keys/release.pub]   # cosign public keys (PEM)
///   keyless:                                      # and/or Fulcio certificates
///     trustedRoot: /etc/wasmlet/sigstore/trusted_root.json
///     identities: [{issuer: https://accounts.google.com, subject: release@acme.example}]
///   required: true                                # refuse what none of them signed
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Verification {
    /// The keys a component may be signed with (PEM public keys, as `cosign
    /// generate-key-pair` writes `cosign.pub`).
    #[serde(default)]
    pub public_keys: Vec<PathBuf>,
    /// Keyless signatures: the identities trusted and the trusted root they are
    /// checked against.
    #[serde(default)]
    pub keyless: Option<keyless::Keyless>,
    /// Refuse a component none of the keys or identities signed. Without it a signature is checked
    /// and recorded when there is one, and an unsigned component still loads.
    #[serde(default)]
    pub required: bool,
}

impl Verification {
    /// Checks the values; the error names the field below `verification`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.required && !self.enabled() {
            return Err(ConfigError::new(
                "required",
                "true needs at least one key in publicKeys or keyless identities \
                 (nothing could verify)",
            ));
        }
        if let Some(keyless) = &self.keyless {
            keyless.validate().map_err(|e| e.under("keyless"))?;
        }
        for (i, p) in self.public_keys.iter().enumerate() {
            if !p.is_absolute() {
                return Err(ConfigError::new(
                    format!("publicKeys[{i}]"),
                    format!("{} is not an absolute path", p.display()),
                ));
            }
        }
        Ok(())
    }

    /// Whether anything is to be checked.
    pub fn enabled(&self) -> bool {
        !self.public_keys.is_empty() || self.keyless.is_some()
    }
}

/// A key components may be signed with.
#[derive(Debug)]
pub(crate) struct TrustedKey {
    /// `sha256:` and the first 16 hex digits of the sha256 of its DER form: how
    /// statuses and events name it (the same on every node, whatever the file is
    /// called there).
    pub(crate) id: String,
    pub(crate) key: CosignVerificationKey,
}

/// Who signed a component, once verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The key's id (`sha256:` and 16 hex digits of its DER form's digest), or for a
    /// keyless signature the certificate's `SUBJECT (ISSUER)`.
    pub signer: String,
}

/// How a signer reads in a message: `key sha256:…`, or a keyless certificate's
/// `SUBJECT (ISSUER)` as it is.
pub fn describe_signer(signer: &str) -> String {
    if signer.starts_with("sha256:") {
        format!("key {signer}")
    } else {
        signer.to_owned()
    }
}

/// Checks signatures against a node's trusted keys and identities.
#[derive(Debug)]
pub struct Verifier {
    pub(crate) keys: Vec<TrustedKey>,
    pub(crate) keyless: Option<keyless::KeylessVerifier>,
    pub(crate) required: bool,
    pub(crate) fingerprint: String,
    /// Where signatures were found before, so that the next lookup asks there first.
    pub(crate) learned: std::sync::Mutex<oci::Learned>,
}

/// The id of a public key: `sha256:` and the first 16 hex digits of its DER form's
/// sha256.
pub fn key_id(der: &[u8]) -> String {
    format!("sha256:{}", &format!("{:x}", Sha256::digest(der))[..16])
}

impl Verifier {
    /// The verifier `config` describes, its keys read; `None` when it asks for nothing.
    /// The error names the key file and what is wrong with it.
    pub fn load(config: &Verification) -> Result<Option<Self>, ConfigError> {
        config.validate()?;
        if !config.enabled() {
            return Ok(None);
        }
        let mut keys = Vec::new();
        for path in &config.public_keys {
            keys.push(read_key(path)?);
        }
        let keyless = config
            .keyless
            .as_ref()
            .map(keyless::KeylessVerifier::load)
            .transpose()?;
        let mut ids: Vec<&str> = keys.iter().map(|k| k.id.as_str()).collect();
        ids.sort_unstable();
        let mut fingerprint = format!("required={} keys={}", config.required, ids.join(","));
        if let Some(k) = &keyless {
            fingerprint.push_str(&format!(" keyless({})", k.fingerprint));
        }
        Ok(Some(Self {
            keys,
            keyless,
            required: config.required,
            fingerprint,
            learned: std::sync::Mutex::default(),
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

    /// What is trusted, for messages: the key ids, the number of keyless identities.
    pub(crate) fn trusted(&self) -> String {
        let mut said = Vec::new();
        if !self.keys.is_empty() {
            let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
            said.push(format!("key {}", ids.join(", ")));
        }
        if self.keyless.is_some() {
            said.push("keyless identity".to_owned());
        }
        said.join(" or ")
    }

    /// The trusted key whose signature `signature` (base64) of `signed` verifies.
    pub(crate) fn by_key(&self, signed: &[u8], signature: &str) -> Option<Verified> {
        self.keys
            .iter()
            .find(|k| {
                k.key
                    .verify_signature(
                        Signature::Base64Encoded(signature.trim().as_bytes()),
                        signed,
                    )
                    .is_ok()
            })
            .map(|k| Verified {
                signer: k.id.clone(),
            })
    }

    /// Verifies a keyless signature of `signed`; the error says why it is refused.
    pub(crate) fn by_identity(
        &self,
        signed: &[u8],
        evidence: keyless::Evidence<'_>,
    ) -> Result<Verified, String> {
        let keyless = self
            .keyless
            .as_ref()
            .ok_or("a keyless signature, and no keyless identity is trusted")?;
        keyless
            .verify(signed, evidence)
            .map(|signer| Verified { signer })
    }
}

/// Reads a PEM public key; the error names the file.
pub(crate) fn read_key(path: &Path) -> Result<TrustedKey, ConfigError> {
    let pem = std::fs::read(path)
        .map_err(|e| ConfigError::new("publicKeys", format!("{}: {e}", path.display())))?;
    let bad = |e: &dyn std::fmt::Display| {
        ConfigError::new(
            "publicKeys",
            format!(
                "{}: not a PEM public key cosign could verify with ({e})",
                path.display()
            ),
        )
    };
    let key = CosignVerificationKey::try_from_pem(&pem).map_err(|e| bad(&e))?;
    let der = keys::pem_contents(&pem).map_err(|e| bad(&e))?;
    Ok(TrustedKey {
        id: key_id(&der),
        key,
    })
}
