//! Sigstore bundles (`application/vnd.dev.sigstore.bundle.v0.3+json`; v0.1 and v0.2
//! read alike): what cosign 3 writes by default. For an image, a DSSE envelope of an
//! in-toto statement whose subject is the manifest's digest (predicate
//! `https://sigstore.dev/cosign/sign/v1`), stored as an OCI referrer of the manifest;
//! for a file (`cosign sign-blob --bundle`), a message signature over the file. The
//! verification material is a public key's hint (checked against the trusted keys) or
//! a certificate (checked as every keyless signature is, with the bundle's Rekor entry).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use sigstore_protobuf_specs::dev::sigstore::bundle::v1::{Bundle, bundle, verification_material};
use sigstore_protobuf_specs::dev::sigstore::rekor::v1::TransparencyLogEntry;

use crate::keyless::{Evidence, rekor};
use crate::verify::{Verified, Verifier};

/// The media types of Sigstore bundles begin so (the artifact type of a referrer, the
/// `mediaType` inside the JSON).
pub const MEDIA_TYPE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";
/// The artifact type cosign gives a signature's referrer.
pub const ARTIFACT_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The payload type of an in-toto statement in a DSSE envelope.
const IN_TOTO: &str = "application/vnd.in-toto+json";

/// What a bundle's signature must be about.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Subject<'a> {
    /// An image: its manifest's digest (`sha256:<hex>`).
    Manifest(&'a str),
    /// A file: its bytes.
    Bytes(&'a [u8]),
}

/// Why a bundle does not count.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// It is about something else (another manifest, other bytes).
    Foreign,
    /// Its signature is by no trusted key or identity; why, when it is keyless.
    Untrusted(Option<String>),
}

/// The statement of an in-toto DSSE payload, as far as it is checked.
#[derive(Debug, Deserialize)]
struct Statement {
    #[serde(default)]
    subject: Vec<StatementSubject>,
}

#[derive(Debug, Deserialize)]
struct StatementSubject {
    #[serde(default)]
    digest: std::collections::BTreeMap<String, String>,
}

/// DSSE's pre-authentication encoding: what a DSSE signature signs.
pub(crate) fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// A parsed bundle, reduced to what is verified.
struct Parts {
    /// The bytes the signature covers.
    signed: Vec<u8>,
    /// The signature, base64.
    signature: String,
    /// The DSSE payload (a Rekor `dsse` entry records its hash), if it is an envelope.
    dsse_payload: Option<Vec<u8>>,
}

impl Verifier {
    /// Verifies a Sigstore bundle's signature of `subject`: by a trusted key, or keyless
    /// by its certificate and Rekor entry.
    pub(crate) fn verify_sigstore_bundle(
        &self,
        json: &[u8],
        subject: Subject<'_>,
    ) -> Result<Verified, Refusal> {
        let bundle: Bundle = serde_json::from_slice(json)
            .map_err(|e| Refusal::Untrusted(Some(format!("not a Sigstore bundle: {e}"))))?;
        let parts = parts(&bundle, subject)?;
        if let Some(v) = self.by_key(&parts.signed, &parts.signature) {
            return Ok(v);
        }
        let Some(certificate) = certificate(&bundle) else {
            return Err(Refusal::Untrusted(None));
        };
        let entry = bundle
            .verification_material
            .as_ref()
            .and_then(|m| m.tlog_entries.first())
            .ok_or_else(|| {
                Refusal::Untrusted(Some("the bundle has no transparency log entry".to_owned()))
            })?;
        let log = rekor_bundle(entry).map_err(|e| Refusal::Untrusted(Some(e)))?;
        if let (Some(keyless), Some(inclusion)) = (&self.keyless, &entry.inclusion_proof) {
            keyless
                .verify_inclusion(&entry.canonicalized_body, inclusion, &log.payload.log_id)
                .map_err(|e| Refusal::Untrusted(Some(e)))?;
        }
        self.by_identity(
            &parts.signed,
            Evidence {
                signature: &parts.signature,
                certificate: &certificate,
                bundle: &log,
                dsse_payload: parts.dsse_payload.as_deref(),
            },
        )
        .map_err(|e| Refusal::Untrusted(Some(e)))
    }
}

/// The signed bytes and signature of `bundle`, if it is about `subject`.
fn parts(bundle: &Bundle, subject: Subject<'_>) -> Result<Parts, Refusal> {
    match (&bundle.content, subject) {
        (Some(bundle::Content::DsseEnvelope(envelope)), _) => {
            if envelope.payload_type != IN_TOTO {
                return Err(Refusal::Foreign);
            }
            let statement: Statement =
                serde_json::from_slice(&envelope.payload).map_err(|_| Refusal::Foreign)?;
            let wanted = match subject {
                Subject::Manifest(digest) => digest.trim_start_matches("sha256:").to_owned(),
                Subject::Bytes(bytes) => format!("{:x}", Sha256::digest(bytes)),
            };
            let about = statement.subject.iter().any(|s| {
                s.digest
                    .get("sha256")
                    .is_some_and(|d| d.eq_ignore_ascii_case(&wanted))
            });
            let signature = envelope.signatures.first().ok_or(Refusal::Foreign)?;
            if !about {
                return Err(Refusal::Foreign);
            }
            Ok(Parts {
                signed: pae(&envelope.payload_type, &envelope.payload),
                signature: STANDARD.encode(&signature.sig),
                dsse_payload: Some(envelope.payload.clone()),
            })
        }
        (Some(bundle::Content::MessageSignature(message)), Subject::Bytes(bytes)) => {
            let digest = message.message_digest.as_ref().map(|d| d.digest.as_slice());
            if digest != Some(Sha256::digest(bytes).as_slice()) {
                return Err(Refusal::Foreign);
            }
            Ok(Parts {
                signed: bytes.to_vec(),
                signature: STANDARD.encode(&message.signature),
                dsse_payload: None,
            })
        }
        // A message signature of an image would sign the manifest's bytes, which cosign
        // does not do; nothing else is a signature.
        _ => Err(Refusal::Foreign),
    }
}

/// The bundle's signing certificate (DER), if it has one.
fn certificate(bundle: &Bundle) -> Option<Vec<u8>> {
    match bundle.verification_material.as_ref()?.content.as_ref()? {
        verification_material::Content::Certificate(c) => Some(c.raw_bytes.clone()),
        verification_material::Content::X509CertificateChain(chain) => {
            chain.certificates.first().map(|c| c.raw_bytes.clone())
        }
        verification_material::Content::PublicKey(_) => None,
    }
}

/// A bundle's log entry as cosign's older bundles carry it: the signed entry
/// timestamp over the entry.
fn rekor_bundle(entry: &TransparencyLogEntry) -> Result<rekor::Bundle, String> {
    let promise = entry.inclusion_promise.as_ref().ok_or(
        "the transparency log entry has no signed entry timestamp (a Rekor v2 entry, \
         which is not read yet)",
    )?;
    let log_id = entry
        .log_id
        .as_ref()
        .map(|l| {
            l.key_id
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        })
        .unwrap_or_default();
    Ok(rekor::Bundle {
        signed_entry_timestamp: STANDARD.encode(&promise.signed_entry_timestamp),
        payload: rekor::Entry {
            body: STANDARD.encode(&entry.canonicalized_body),
            integrated_time: entry.integrated_time,
            log_index: entry.log_index,
            log_id,
        },
    })
}
