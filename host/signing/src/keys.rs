//! Signing keys as cosign keeps them: a private key encrypted with a password (the
//! `ENCRYPTED SIGSTORE PRIVATE KEY` PEM of `cosign generate-key-pair`, the password from
//! `COSIGN_PASSWORD`), and its public key as a PEM `PUBLIC KEY`.

use base64::Engine as _;
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::{SigStoreSigner, SigningScheme};
use zeroize::Zeroizing;

/// Where the password of a private key is read from, as cosign reads it.
pub const PASSWORD_ENV: &str = "COSIGN_PASSWORD";

/// A new key pair: the private key encrypted with `password` (PEM), the public key
/// (PEM). ECDSA P-256, cosign's default.
pub fn generate(password: &[u8]) -> Result<(Zeroizing<String>, String), String> {
    let signer = SigningScheme::ECDSA_P256_SHA256_ASN1
        .create_signer()
        .map_err(|e| format!("making a key: {e}"))?;
    let pair = signer
        .to_sigstore_keypair()
        .map_err(|e| format!("making a key: {e}"))?;
    let private = pair
        .private_key_to_encrypted_pem(password)
        .map_err(|e| format!("encrypting the private key: {e}"))?;
    let public = pair
        .public_key_to_pem()
        .map_err(|e| format!("writing the public key: {e}"))?;
    Ok((private, public))
}

/// A signer from a private key's PEM (encrypted with `password`, or unencrypted when
/// the password is empty and the PEM is a plain private key).
pub fn signer(pem: &[u8], password: &[u8]) -> Result<SigStoreSigner, String> {
    let pair = if password.is_empty() && !pem_label(pem).starts_with("ENCRYPTED") {
        SigStoreKeyPair::from_pem(pem)
    } else {
        SigStoreKeyPair::from_encrypted_pem(pem, password)
    }
    .map_err(|e| format!("not a private key this password opens: {e}"))?;
    pair.to_sigstore_signer(&SigningScheme::default())
        .map_err(|e| format!("not an ECDSA P-256 key (cosign's default): {e}"))
}

/// The signature of `bytes` by `signer`, base64: what `cosign sign-blob` prints.
pub fn sign_blob(signer: &SigStoreSigner, bytes: &[u8]) -> Result<String, String> {
    let signature = signer.sign(bytes).map_err(|e| format!("signing: {e}"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(signature))
}

/// The public key of `signer`, PEM.
pub fn public_pem(signer: &SigStoreSigner) -> Result<String, String> {
    signer
        .to_sigstore_keypair()
        .and_then(|p| p.public_key_to_pem())
        .map_err(|e| format!("reading the public key: {e}"))
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
pub fn pem_contents(pem: &[u8]) -> Result<Vec<u8>, String> {
    let text = String::from_utf8_lossy(pem);
    let body: String = text
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("-----BEGIN "))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END "))
        .collect();
    if body.is_empty() {
        return Err("no PEM block".into());
    }
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| format!("the PEM block is not base64: {e}"))
}
