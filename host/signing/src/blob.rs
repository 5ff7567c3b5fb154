//! A file's signature ([`Verifier::verify_blob`]), in whichever form cosign wrote it
//! beside the file: a key's signature, cosign 2's keyless bundle, or a Sigstore bundle
//! ([`crate::bundle`]). Above both the key and identity checks ([`crate::verify`]) and
//! the bundles.

use base64::Engine as _;

use crate::error::VerifyError;
use crate::verify::{Verified, Verifier};
use crate::{bundle, keyless};

impl Verifier {
    /// Verifies a file's signature of `bytes`: base64, as `cosign sign-blob` prints it;
    /// the JSON of cosign 2's `sign-blob --bundle` (keyless: certificate and Rekor
    /// bundle); or a Sigstore bundle, as cosign 3's `sign-blob --bundle` writes it.
    pub fn verify_blob(&self, bytes: &[u8], signature: &str) -> Result<Verified, VerifyError> {
        let signature = signature.trim();
        if !signature.starts_with('{') {
            return self.by_key(bytes, signature).ok_or_else(|| {
                VerifyError::Untrusted(format!(
                    "the signature does not verify with any trusted {}",
                    self.trusted()
                ))
            });
        }
        let json: serde_json::Value = serde_json::from_str(signature)
            .map_err(|e| VerifyError::Malformed(format!("not a signature bundle (JSON): {e}")))?;
        if json["mediaType"]
            .as_str()
            .is_some_and(|t| t.starts_with(bundle::MEDIA_TYPE_PREFIX))
        {
            return self
                .verify_sigstore_bundle(signature.as_bytes(), bundle::Subject::Bytes(bytes))
                .map_err(|r| {
                    VerifyError::Untrusted(match r {
                        bundle::Refusal::Foreign => {
                            "the Sigstore bundle is a signature of other bytes".to_owned()
                        }
                        bundle::Refusal::Untrusted(None) => format!(
                            "the Sigstore bundle's signature is by no trusted {}",
                            self.trusted()
                        ),
                        bundle::Refusal::Untrusted(Some(why)) => {
                            format!("the keyless signature is refused: {why}")
                        }
                    })
                });
        }
        let bundle: keyless::BlobBundle = serde_json::from_value(json)
            .map_err(|e| VerifyError::Malformed(format!("not a cosign signature bundle: {e}")))?;
        if let Some(v) = self.by_key(bytes, &bundle.base64_signature) {
            return Ok(v);
        }
        let pem = base64::engine::general_purpose::STANDARD
            .decode(bundle.cert.trim())
            .map_err(|e| VerifyError::Malformed(format!("the bundle's cert is not base64: {e}")))?;
        let refused = |e| VerifyError::Untrusted(format!("the keyless signature is refused: {e}"));
        let certificate = keyless::certificate_der(&pem).map_err(refused)?;
        self.by_identity(
            bytes,
            keyless::Evidence {
                signature: &bundle.base64_signature,
                certificate: &certificate,
                bundle: &bundle.rekor_bundle,
                dsse_payload: None,
            },
        )
        .map_err(refused)
    }
}
