//! A Rekor entry as cosign keeps it beside a keyless signature (the
//! `dev.sigstore.cosign/bundle` annotation of a signature layer, `rekorBundle` of a
//! `cosign sign-blob --bundle` file): the log's signed entry timestamp over the entry,
//! checked offline against the trusted root's log keys, and the entry's body, which must
//! record this signature, by this certificate, of these bytes.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use sigstore::crypto::Signature;

use super::root::Root;

/// The bundle: the entry and the log's signature over it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Bundle {
    /// The log's signature (base64) over the canonical JSON of `payload`.
    pub signed_entry_timestamp: String,
    pub payload: Entry,
}

/// What the log signed. Serialized with these names, keys sorted (RFC 8785), it is the
/// signed text.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The entry (base64 JSON: a `hashedrekord` or `rekord`).
    pub body: String,
    /// When the log took it, seconds since the epoch.
    pub integrated_time: i64,
    pub log_index: i64,
    /// The hex sha256 of the log key's DER form.
    #[serde(rename = "logID")]
    pub log_id: String,
}

impl Bundle {
    /// Parses a bundle's JSON.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("not a Rekor bundle: {e}"))
    }

    /// Checks the log's signature over the entry with the trusted root's key for its
    /// log, valid when the entry was taken; returns that time.
    pub(crate) fn verify(&self, root: &Root) -> Result<i64, String> {
        let entry = &self.payload;
        let log = root.logs.get(&entry.log_id).ok_or_else(|| {
            format!(
                "the Rekor entry is from log {}, which the trusted root does not list",
                entry.log_id
            )
        })?;
        let signed =
            serde_json_canonicalizer::to_vec(entry).map_err(|e| format!("the Rekor entry: {e}"))?;
        log.key
            .verify_signature(
                Signature::Base64Encoded(self.signed_entry_timestamp.as_bytes()),
                &signed,
            )
            .map_err(|_| {
                format!(
                    "the Rekor entry's signed timestamp does not verify with the key of log {}",
                    entry.log_id
                )
            })?;
        if !log.valid.contains(entry.integrated_time) {
            return Err(format!(
                "the Rekor entry was taken at {} (unix), outside the time the trusted root gives log {}",
                entry.integrated_time, entry.log_id
            ));
        }
        Ok(entry.integrated_time)
    }

    /// Checks that the entry records `signature` (base64) of `signed` by the
    /// certificate whose DER form is `certificate`: a `hashedrekord` (or `rekord`) entry
    /// of the signed bytes' hash, or for a DSSE envelope a `dsse` entry of its payload's
    /// hash.
    pub(crate) fn records(
        &self,
        signed: &[u8],
        signature: &str,
        certificate: &[u8],
        dsse_payload: Option<&[u8]>,
    ) -> Result<(), String> {
        let raw = STANDARD
            .decode(self.payload.body.as_bytes())
            .map_err(|e| format!("the Rekor entry's body is not base64: {e}"))?;
        let body: Value = serde_json::from_slice(&raw)
            .map_err(|e| format!("the Rekor entry's body is not a signature record: {e}"))?;
        let kind = body["kind"].as_str().unwrap_or_default();
        let spec = &body["spec"];
        let (hash, recorded) = match (kind, dsse_payload) {
            ("hashedrekord" | "rekord", None) => (
                &spec["data"]["hash"],
                vec![(
                    &spec["signature"]["content"],
                    &spec["signature"]["publicKey"]["content"],
                )],
            ),
            ("dsse", Some(_)) => (
                &spec["payloadHash"],
                spec["signatures"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| (&s["signature"], &s["verifier"]))
                    .collect(),
            ),
            (kind, _) => {
                return Err(format!(
                    "the Rekor entry is a {kind:?} entry, not a record of this kind of signature"
                ));
            }
        };
        let hashed = dsse_payload.unwrap_or(signed);
        let algorithm = hash["algorithm"].as_str().unwrap_or_default();
        let value = hash["value"].as_str().unwrap_or_default();
        if !algorithm.eq_ignore_ascii_case("sha256")
            || !value.eq_ignore_ascii_case(&format!("{:x}", Sha256::digest(hashed)))
        {
            return Err("the Rekor entry records a signature of other bytes".into());
        }
        let decode = |v: &Value| {
            v.as_str()
                .and_then(|b64| STANDARD.decode(b64.trim().as_bytes()).ok())
        };
        let ours = STANDARD.decode(signature.trim().as_bytes()).ok();
        let by_us: Vec<&(&Value, &Value)> = recorded
            .iter()
            .filter(|(sig, _)| ours.is_some() && decode(sig) == ours)
            .collect();
        if by_us.is_empty() {
            return Err("the Rekor entry records another signature".into());
        }
        let by_this_certificate = by_us.iter().any(|(_, verifier)| {
            decode(verifier)
                .and_then(|pem| super::cert::der_of(&pem).ok())
                .is_some_and(|der| der == certificate)
        });
        if !by_this_certificate {
            return Err("the Rekor entry records another certificate".into());
        }
        Ok(())
    }
}
