//! Signing keys as cosign keeps them: a private key encrypted with a password (the
//! `ENCRYPTED SIGSTORE PRIVATE KEY` PEM of `cosign generate-key-pair`, the password from
//! `COSIGN_PASSWORD`), and its public key as a PEM `PUBLIC KEY`.

use base64::Engine as _;
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::{SigStoreSigner, SigningScheme};
use zeroize::Zeroizing;

/// What went wrong with a key, sigstore's or base64's error kept as the source.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// sigstore refused: what was being done (`signing`, `not a private key this
    /// password opens`, …) and its error.
    #[error("{doing}: {source}")]
    Sigstore {
        /// What was being done.
        doing: &'static str,
        /// sigstore's error.
        #[source]
        source: sigstore::errors::SigstoreError,
    },
    /// No `-----BEGIN …-----` block.
    #[error("no PEM block")]
    NoPem,
    /// The block's body is not base64.
    #[error("the PEM block is not base64: {0}")]
    Base64(#[source] base64::DecodeError),
}

/// `doing` failed with sigstore's `source`.
fn failed(doing: &'static str) -> impl FnOnce(sigstore::errors::SigstoreError) -> KeyError {
    move |source| KeyError::Sigstore { doing, source }
}

/// Where the password of a private key is read from, as cosign reads it.
pub const PASSWORD_ENV: &str = "COSIGN_PASSWORD";

/// A new key pair: the private key encrypted with `password` (PEM), the public key
/// (PEM). ECDSA P-256, cosign's default.
pub fn generate(password: &[u8]) -> Result<(Zeroizing<String>, String), KeyError> {
    let signer = SigningScheme::ECDSA_P256_SHA256_ASN1
        .create_signer()
        .map_err(failed("making a key"))?;
    let pair = signer
        .to_sigstore_keypair()
        .map_err(failed("making a key"))?;
    let private = pair
        .private_key_to_encrypted_pem(password)
        .map_err(failed("encrypting the private key"))?;
    let public = pair
        .public_key_to_pem()
        .map_err(failed("writing the public key"))?;
    Ok((private, public))
}

/// A signer from a private key's PEM (encrypted with `password`, or unencrypted when
/// the password is empty and the PEM is a plain private key).
pub fn signer(pem: &[u8], password: &[u8]) -> Result<SigStoreSigner, KeyError> {
    let pair = if password.is_empty() && !pem_label(pem).starts_with("ENCRYPTED") {
        SigStoreKeyPair::from_pem(pem)
    } else {
        SigStoreKeyPair::from_encrypted_pem(pem, password)
    }
    .map_err(failed("not a private key this password opens"))?;
    pair.to_sigstore_signer(&SigningScheme::default())
        .map_err(failed("not an ECDSA P-256 key (cosign's default)"))
}

/// The signature of `bytes` by `signer`, base64: what `cosign sign-blob` prints.
pub fn sign_blob(signer: &SigStoreSigner, bytes: &[u8]) -> Result<String, KeyError> {
    let signature = signer.sign(bytes).map_err(failed("signing"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(signature))
}

/// The public key of `signer`, PEM.
pub fn public_pem(signer: &SigStoreSigner) -> Result<String, KeyError> {
    signer
        .to_sigstore_keypair()
        .and_then(|p| p.public_key_to_pem())
        .map_err(failed("reading the public key"))
}

/// The label of a PEM block (`PUBLIC KEY`, `ENCRYPTED SIGSTORE PRIVATE KEY`, …).
fn pem_label(pem: &[u8]) -> String {
    String::from_utf8_lossy(pem)
        .lines()
        .find_map(|l| l.trim().strip_prefix("-----BEGIN "))
        .and_then(|l| l.strip_suffix("-----"))
        .unwrap_or_default()
        .to_owned()
}

/// The bytes inside the first PEM block.
pub fn pem_contents(pem: &[u8]) -> Result<Vec<u8>, KeyError> {
    let text = String::from_utf8_lossy(pem);
    let body: String = text
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("-----BEGIN "))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END "))
        .collect();
    if body.is_empty() {
        return Err(KeyError::NoPem);
    }
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(KeyError::Base64)
}
