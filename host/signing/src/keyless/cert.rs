//! A keyless signing certificate (Fulcio's): issued by a certificate authority of the
//! trusted root, valid when the log took the signature, for code signing; who it names
//! (the subject alternative name) and which OpenID Connect issuer vouched for them.

use pki_types::{CertificateDer, UnixTime};
use sigstore::cosign::signature_layers::CertificateSubject;
use sigstore::crypto::CosignVerificationKey;
use std::time::Duration;
use x509_cert::Certificate;
use x509_cert::der::asn1::Utf8StringRef;
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Decode, Encode};

use super::root::Root;

/// The OpenID Connect issuer, DER UTF8String (Fulcio's current extension).
const ISSUER_V2: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.8");
/// The OpenID Connect issuer, raw text (the extension Fulcio wrote first and still
/// writes).
const ISSUER_V1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.1");
/// Extended key usage: code signing (1.3.6.1.5.5.7.3.3), DER content octets.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

/// The signature algorithms a certificate chain may use.
static ALGORITHMS: &[&dyn pki_types::SignatureVerificationAlgorithm] = &[
    webpki::ring::ECDSA_P256_SHA256,
    webpki::ring::ECDSA_P256_SHA384,
    webpki::ring::ECDSA_P384_SHA256,
    webpki::ring::ECDSA_P384_SHA384,
    webpki::ring::ED25519,
    webpki::ring::RSA_PKCS1_2048_8192_SHA256,
    webpki::ring::RSA_PKCS1_2048_8192_SHA384,
    webpki::ring::RSA_PKCS1_2048_8192_SHA512,
    webpki::ring::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
    webpki::ring::RSA_PSS_2048_8192_SHA384_LEGACY_KEY,
    webpki::ring::RSA_PSS_2048_8192_SHA512_LEGACY_KEY,
];

/// A certificate that chained to the trusted root.
pub(crate) struct Leaf {
    /// Its key, which must have made the signature.
    pub(crate) key: CosignVerificationKey,
    /// The email or URI it was issued to.
    pub(crate) subject: String,
    /// The OpenID Connect issuer that vouched for the subject.
    pub(crate) issuer: String,
}

/// Checks that `der` was issued, for code signing, by one of `root`'s certificate
/// authorities valid at `at` (seconds since the epoch, when the log took the
/// signature), and was itself valid then; returns who it names.
pub(crate) fn verify(der: &[u8], root: &Root, at: i64) -> Result<Leaf, String> {
    let leaf = CertificateDer::from(der);
    let end_entity = webpki::EndEntityCert::try_from(&leaf)
        .map_err(|e| format!("the signing certificate does not parse ({e})"))?;
    let time = UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(at).unwrap_or(0)));
    let mut refusals = Vec::new();
    for ca in root.authorities.iter().filter(|ca| ca.valid.contains(at)) {
        let Some((anchor, intermediates)) = ca.chain.split_last() else {
            continue;
        };
        let anchor = CertificateDer::from(anchor.as_slice());
        let anchors = match webpki::anchor_from_trusted_cert(&anchor) {
            Ok(a) => [a.to_owned()],
            Err(e) => {
                refusals.push(format!("{}: {e}", ca.uri));
                continue;
            }
        };
        let intermediates: Vec<CertificateDer> = intermediates
            .iter()
            .map(|c| CertificateDer::from(c.as_slice()))
            .collect();
        match end_entity.verify_for_usage(
            ALGORITHMS,
            &anchors,
            &intermediates,
            time,
            webpki::KeyUsage::required(CODE_SIGNING),
            None,
            None,
        ) {
            Ok(_) => return identity(der),
            Err(e) => refusals.push(format!("{}: {e:?}", ca.uri)),
        }
    }
    Err(if refusals.is_empty() {
        format!(
            "the trusted root has no certificate authority valid at {at} (unix), when the log took the signature"
        )
    } else {
        format!(
            "the signing certificate was not issued, valid at {at} (unix), by a certificate authority of the trusted root ({})",
            refusals.join("; ")
        )
    })
}

/// The key, subject and issuer of a certificate already verified.
fn identity(der: &[u8]) -> Result<Leaf, String> {
    let cert = Certificate::from_der(der)
        .map_err(|e| format!("the signing certificate does not parse ({e})"))?;
    let subject = match CertificateSubject::from_certificate(&cert) {
        Ok(CertificateSubject::Email(e)) => e,
        Ok(CertificateSubject::Uri(u)) => u,
        Err(e) => return Err(format!("the signing certificate names no subject ({e})")),
    };
    let issuer = issuer(&cert).ok_or_else(|| {
        format!("the signing certificate of {subject} names no OpenID Connect issuer")
    })?;
    let key = CosignVerificationKey::try_from(cert.tbs_certificate().subject_public_key_info())
        .map_err(|e| format!("the signing certificate's key: {e}"))?;
    Ok(Leaf {
        key,
        subject,
        issuer,
    })
}

/// The issuer extension's value: the DER string of the current one, else the raw
/// text of the first.
fn issuer(cert: &Certificate) -> Option<String> {
    let extensions = cert.tbs_certificate().extensions()?;
    let value = |oid| {
        extensions
            .iter()
            .find(|e| e.extn_id == oid)
            .map(|e| e.extn_value.as_bytes())
    };
    if let Some(v2) = value(ISSUER_V2) {
        return Utf8StringRef::from_der(v2)
            .ok()
            .map(|s| s.as_str().to_owned());
    }
    value(ISSUER_V1).and_then(|v1| String::from_utf8(v1.to_vec()).ok())
}

/// The DER form of a PEM certificate (the first block).
pub(crate) fn der_of(pem: &[u8]) -> Result<Vec<u8>, String> {
    let der = crate::keys::pem_contents(pem)
        .map_err(|e| format!("the signing certificate is not PEM ({e})"))?;
    // Re-encoded, so that what is compared is the certificate, not its PEM spelling.
    Certificate::from_der(&der)
        .and_then(|c| c.to_der())
        .map_err(|e| format!("the signing certificate does not parse ({e})"))
}
