//! Sigstore's trusted root (`trusted_root.json`, the `TrustedRoot` message of
//! sigstore's protobuf specs, as `cosign verify --trusted-root` and the TUF repository
//! distribute it): the certificate authorities keyless certificates chain to and the
//! transparency logs whose signed entry timestamps are accepted, each with the time it
//! is valid for. Read once from a file; nothing is fetched.

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};
use sigstore::crypto::CosignVerificationKey;
use sigstore_protobuf_specs::dev::sigstore::common::v1::TimeRange;
use sigstore_protobuf_specs::dev::sigstore::trustroot::v1::{TransparencyLogInstance, TrustedRoot};

/// A time range in seconds since the epoch; an open end is unbounded.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Validity {
    start: Option<i64>,
    end: Option<i64>,
}

impl Validity {
    fn from(range: Option<&TimeRange>) -> Self {
        Self {
            start: range.and_then(|r| r.start).map(|t| t.seconds),
            end: range.and_then(|r| r.end).map(|t| t.seconds),
        }
    }

    /// Whether `at` (seconds since the epoch) falls within, ends included.
    pub(crate) fn contains(&self, at: i64) -> bool {
        self.start.is_none_or(|s| s <= at) && self.end.is_none_or(|e| at <= e)
    }
}

/// A certificate authority: its chain (DER, the trust anchor last) and when it issued.
#[derive(Debug)]
pub(crate) struct Authority {
    pub(crate) uri: String,
    pub(crate) chain: Vec<Vec<u8>>,
    pub(crate) valid: Validity,
}

/// A transparency log's key and when it signed.
#[derive(Debug)]
pub(crate) struct Log {
    pub(crate) key: CosignVerificationKey,
    pub(crate) valid: Validity,
}

/// What a trusted root file says, ready to verify with.
#[derive(Debug)]
pub(crate) struct Root {
    pub(crate) authorities: Vec<Authority>,
    /// Transparency logs by id: the hex sha256 of the key's DER form (a Rekor
    /// entry's `logID`).
    pub(crate) logs: BTreeMap<String, Log>,
    /// Certificate transparency logs, by the same id (an SCT's log id).
    pub(crate) ct_logs: BTreeMap<String, Log>,
    /// Every certificate of the authorities' chains as an issuer: its subject (DER) and
    /// the sha256 of its key (DER) — what a certificate transparency timestamp names
    /// its certificate's issuer by.
    pub(crate) issuers: Vec<(Vec<u8>, Vec<u8>)>,
    /// `sha256:<hex>` of the file: what a verified component was verified under.
    pub(crate) digest: String,
}

/// Reads `path`; the error names the file and what is missing or wrong.
pub(crate) fn read(path: &Path) -> Result<Root, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses a trusted root's JSON.
pub(crate) fn parse(bytes: &[u8]) -> Result<Root, String> {
    let root: TrustedRoot = serde_json::from_slice(bytes)
        .map_err(|e| format!("not a Sigstore trusted root (trusted_root.json): {e}"))?;
    let mut authorities = Vec::new();
    let mut issuers = Vec::new();
    for (i, ca) in root.certificate_authorities.iter().enumerate() {
        let chain: Vec<Vec<u8>> = ca
            .cert_chain
            .iter()
            .flat_map(|c| &c.certificates)
            .map(|c| c.raw_bytes.clone())
            .collect();
        if chain.is_empty() {
            return Err(format!("certificateAuthorities[{i}]: no certificates"));
        }
        for (j, der) in chain.iter().enumerate() {
            let bad = |e: &dyn std::fmt::Display| {
                format!(
                    "certificateAuthorities[{i}].certChain.certificates[{j}]: not a certificate ({e})"
                )
            };
            webpki::EndEntityCert::try_from(&pki_types::CertificateDer::from(der.as_slice()))
                .map_err(|e| bad(&e))?;
            issuers.push(issuer(der).map_err(|e| bad(&e))?);
        }
        authorities.push(Authority {
            uri: ca.uri.clone(),
            chain,
            valid: Validity::from(ca.valid_for.as_ref()),
        });
    }
    let logs = read_logs("tlogs", &root.tlogs)?;
    let ct_logs = read_logs("ctlogs", &root.ctlogs)?;
    if authorities.is_empty() {
        return Err("no certificateAuthorities: no keyless certificate could verify".into());
    }
    if logs.is_empty() {
        return Err("no tlogs: no transparency log entry could verify".into());
    }
    Ok(Root {
        authorities,
        issuers,
        logs,
        ct_logs,
        digest: format!("sha256:{:x}", Sha256::digest(bytes)),
    })
}

/// A certificate's subject (DER) and the sha256 of its key (DER).
fn issuer(der: &[u8]) -> Result<(Vec<u8>, Vec<u8>), x509_cert::der::Error> {
    use x509_cert::der::{Decode, Encode};
    let cert = x509_cert::Certificate::from_der(der)?;
    let tbs = cert.tbs_certificate();
    let key = tbs.subject_public_key_info().to_der()?;
    Ok((tbs.subject().to_der()?, Sha256::digest(key).to_vec()))
}

/// The logs of `field` by id; the error names the entry.
fn read_logs(
    field: &str,
    instances: &[TransparencyLogInstance],
) -> Result<BTreeMap<String, Log>, String> {
    let mut logs = BTreeMap::new();
    for (i, log) in instances.iter().enumerate() {
        let public = log
            .public_key
            .as_ref()
            .ok_or_else(|| format!("{field}[{i}]: no publicKey"))?;
        let der = public
            .raw_bytes
            .as_deref()
            .ok_or_else(|| format!("{field}[{i}].publicKey: no rawBytes"))?;
        let key = CosignVerificationKey::try_from_der(der)
            .map_err(|e| format!("{field}[{i}].publicKey: not a key this can verify with ({e})"))?;
        logs.insert(
            format!("{:x}", Sha256::digest(der)),
            Log {
                key,
                valid: Validity::from(public.valid_for.as_ref()),
            },
        );
    }
    Ok(logs)
}
