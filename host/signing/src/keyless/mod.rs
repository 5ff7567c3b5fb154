//! Keyless signatures: a short-lived certificate from Sigstore's Fulcio naming who
//! signed (an email, or a workload's URI such as a CI workflow) and the OpenID Connect
//! issuer that vouched for them, and the Rekor transparency log's signed timestamp of
//! the signature — what `cosign sign` makes without `--key`. Checked offline against a
//! trusted root file, as `cosign verify --trusted-root … --certificate-identity …
//! --certificate-oidc-issuer …` checks them with `--offline`:
//!
//! 1. the log entry's signed timestamp verifies with a log key of the trusted root,
//!    valid at the time the entry was taken (and a Sigstore bundle's inclusion proof,
//!    when it carries one, leads to a tree the log signed);
//! 2. the entry records this signature, by this certificate, of these bytes;
//! 3. the certificate chains, for code signing, to a certificate authority of the
//!    trusted root, and both were valid at that time;
//! 4. when the trusted root lists certificate transparency logs, the certificate
//!    carries a timestamp (SCT) by one of them;
//! 5. the signature verifies with the certificate's key;
//! 6. the certificate's subject and issuer are one of the trusted identities.

mod cert;
pub(crate) mod proof;
pub(crate) mod rekor;
mod root;
pub(crate) mod sct;

use std::path::PathBuf;

use regex::Regex;
use serde::Deserialize;
use sigstore::crypto::Signature;

use crate::error::ConfigError;

/// The `keyless:` section of `verification`.
///
/// ```yaml
/// keyless:
///   trustedRoot: /etc/wasmlet/sigstore/trusted_root.json
///   identities:
///   - issuer: https://token.actions.githubusercontent.com
///     subject: https://github.com/acme/policies/.github/workflows/release.yml@refs/heads/main
///   - issuer: https://accounts.google.com
///     subjectRegExp: '.*@acme\.example'
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Keyless {
    /// Sigstore's `trusted_root.json`: the certificate authorities and transparency
    /// logs to trust (public Sigstore's, or a private deployment's).
    pub trusted_root: PathBuf,
    /// Who may sign: a certificate is accepted when one of these matches it.
    #[serde(default)]
    pub identities: Vec<Identity>,
}

/// A signer's identity: the certificate's subject (email or URI) and its OpenID Connect
/// issuer, each exactly or by a regular expression that must match the whole value.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Identity {
    /// The issuer, exactly (`https://token.actions.githubusercontent.com`).
    #[serde(default)]
    pub issuer: Option<String>,
    /// The issuer, by a regular expression matching all of it.
    #[serde(default)]
    pub issuer_reg_exp: Option<String>,
    /// The subject, exactly: an email or a URI.
    #[serde(default)]
    pub subject: Option<String>,
    /// The subject, by a regular expression matching all of it.
    #[serde(default)]
    pub subject_reg_exp: Option<String>,
}

impl Keyless {
    /// Checks the values; the error names the field below `keyless`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.trusted_root.is_absolute() {
            return Err(ConfigError::new(
                "trustedRoot",
                format!("{} is not an absolute path", self.trusted_root.display()),
            ));
        }
        if self.identities.is_empty() {
            return Err(ConfigError::new(
                "identities",
                "at least one is needed (any certificate of the trusted root's \
                 authorities would do otherwise)",
            ));
        }
        for (i, identity) in self.identities.iter().enumerate() {
            Matcher::new(identity).map_err(|e| e.under(&format!("identities[{i}]")))?;
        }
        Ok(())
    }
}

/// One string rule: exact or a whole-value regular expression.
#[derive(Debug)]
enum Rule {
    Exact(String),
    Pattern(Regex),
}

impl Rule {
    /// The rule of a field pair; the error names the field.
    fn new(
        name: &str,
        exact: Option<&String>,
        pattern: Option<&String>,
    ) -> Result<Self, ConfigError> {
        match (exact, pattern) {
            (Some(e), None) => Ok(Rule::Exact(e.clone())),
            (None, Some(p)) => Regex::new(&format!("^(?:{p})$"))
                .map(Rule::Pattern)
                .map_err(|e| ConfigError::new(format!("{name}RegExp"), e.to_string())),
            (Some(_), Some(_)) => Err(ConfigError::new(
                name,
                format!("give {name} or {name}RegExp, not both"),
            )),
            (None, None) => Err(ConfigError::new(
                name,
                format!("{name} or {name}RegExp is required"),
            )),
        }
    }

    fn matches(&self, value: &str) -> bool {
        match self {
            Rule::Exact(e) => e == value,
            Rule::Pattern(p) => p.is_match(value),
        }
    }
}

/// A compiled identity.
#[derive(Debug)]
struct Matcher {
    issuer: Rule,
    subject: Rule,
}

impl Matcher {
    fn new(identity: &Identity) -> Result<Self, ConfigError> {
        Ok(Self {
            issuer: Rule::new(
                "issuer",
                identity.issuer.as_ref(),
                identity.issuer_reg_exp.as_ref(),
            )?,
            subject: Rule::new(
                "subject",
                identity.subject.as_ref(),
                identity.subject_reg_exp.as_ref(),
            )?,
        })
    }
}

/// What a keyless signature carries beside the signed bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Evidence<'a> {
    /// The signature, base64.
    pub(crate) signature: &'a str,
    /// The signing certificate, DER.
    pub(crate) certificate: &'a [u8],
    /// The Rekor entry and its signed timestamp.
    pub(crate) bundle: &'a rekor::Bundle,
    /// For a DSSE envelope, its payload (the entry records its hash, not the signed
    /// bytes').
    pub(crate) dsse_payload: Option<&'a [u8]>,
}

/// The DER form of a PEM certificate.
pub(crate) fn certificate_der(pem: &[u8]) -> Result<Vec<u8>, String> {
    cert::der_of(pem)
}

/// Verifies keyless signatures against a trusted root and identities.
#[derive(Debug)]
pub(crate) struct KeylessVerifier {
    root: root::Root,
    identities: Vec<Matcher>,
    /// What it trusts, for the verifier's fingerprint.
    pub(crate) fingerprint: String,
}

impl KeylessVerifier {
    /// Reads the trusted root; the error names the file.
    pub(crate) fn load(config: &Keyless) -> Result<Self, ConfigError> {
        config.validate().map_err(|e| e.under("keyless"))?;
        let root = root::read(&config.trusted_root)
            .map_err(|e| ConfigError::new("keyless.trustedRoot", e))?;
        let identities = config
            .identities
            .iter()
            .map(Matcher::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.under("keyless"))?;
        let mut described: Vec<String> =
            config.identities.iter().map(|i| format!("{i:?}")).collect();
        described.sort_unstable();
        let fingerprint = format!("root={} identities={}", root.digest, described.join(";"));
        Ok(Self {
            root,
            identities,
            fingerprint,
        })
    }

    /// Checks an entry's inclusion proof (`body`: the entry, canonical) against the
    /// log `log_id` (hex) of the trusted root.
    pub(crate) fn verify_inclusion(
        &self,
        body: &[u8],
        inclusion: &sigstore_protobuf_specs::dev::sigstore::rekor::v1::InclusionProof,
        log_id: &str,
    ) -> Result<(), String> {
        proof::verify(body, inclusion, log_id, &self.root)
    }

    /// Verifies `evidence` for `signed`; on success, who signed: `SUBJECT (ISSUER)`.
    pub(crate) fn verify(&self, signed: &[u8], evidence: Evidence<'_>) -> Result<String, String> {
        let bundle = evidence.bundle;
        let at = bundle.verify(&self.root)?;
        let der = evidence.certificate;
        bundle.records(signed, evidence.signature, der, evidence.dsse_payload)?;
        let leaf = cert::verify(der, &self.root, at)?;
        sct::verify(der, &self.root)?;
        leaf.key
            .verify_signature(
                Signature::Base64Encoded(evidence.signature.trim().as_bytes()),
                signed,
            )
            .map_err(|_| {
                format!(
                    "the signature does not verify with the key of {}'s certificate",
                    leaf.subject
                )
            })?;
        if !self
            .identities
            .iter()
            .any(|m| m.issuer.matches(&leaf.issuer) && m.subject.matches(&leaf.subject))
        {
            return Err(format!(
                "signed by {} (issuer {}), not a trusted identity",
                leaf.subject, leaf.issuer
            ));
        }
        Ok(format!("{} ({})", leaf.subject, leaf.issuer))
    }
}

/// A `cosign sign-blob --bundle` file: the signature, the certificate (PEM, base64)
/// and the Rekor bundle.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BlobBundle {
    pub(crate) base64_signature: String,
    pub(crate) cert: String,
    pub(crate) rekor_bundle: rekor::Bundle,
}

#[cfg(test)]
mod tests;
