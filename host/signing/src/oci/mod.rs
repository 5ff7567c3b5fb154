//! Signatures of artifacts in an OCI registry, where cosign keeps them: a manifest
//! tagged `sha256-<hex of the artifact's manifest digest>.sig` in the artifact's
//! repository, one layer per signature — the simple-signing payload naming the
//! artifact's manifest, its signature in the layer's `dev.cosignproject.cosign/signature`
//! annotation, and for a keyless signature the certificate and the Rekor bundle in
//! `dev.sigstore.cosign/certificate` and `dev.sigstore.cosign/bundle`.

mod sign;
mod verify;

use oci_client::Client as OciClient;
use oci_client::Reference;
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use sha2::Digest as _;
use sigstore::cosign::payload::SimpleSigning;
use sigstore::registry::OciReference;

pub use sign::{Signed, attach, resolve};
pub(crate) use verify::Learned;
pub use verify::VERIFY_TIMEOUT;

/// The media type of a cosign signature layer (a simple-signing payload).
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation of a signature layer that holds the signature, base64.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The annotation of a keyless signature layer that holds the signing certificate (PEM).
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// The annotation of a keyless signature layer that holds the certificate's chain (PEM).
pub const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
/// The annotation of a signature layer that holds its Rekor bundle (JSON).
pub const BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";

/// How to reach a registry: plain HTTP or HTTPS, and with which credentials.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Plain HTTP (a registry on loopback without TLS).
    pub insecure: bool,
    /// User and password; anonymous without.
    pub credentials: Option<(String, String)>,
}

impl Registry {
    /// An OCI client and credentials for this registry (what verification reads with).
    pub fn oci(&self) -> (OciClient, RegistryAuth) {
        let client = OciClient::new(oci_client::client::ClientConfig {
            protocol: if self.insecure {
                oci_client::client::ClientProtocol::Http
            } else {
                oci_client::client::ClientProtocol::Https
            },
            ..Default::default()
        });
        let auth = match &self.credentials {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        };
        (client, auth)
    }
}

/// Where the signatures of the manifest `digest` in `repository`'s repository are:
/// `REPO:sha256-<hex>.sig`.
pub fn signature_reference(repository: &Reference, digest: &str) -> Reference {
    Reference::with_tag(
        repository.registry().to_owned(),
        repository.repository().to_owned(),
        format!("{}.sig", digest.replace(':', "-")),
    )
}

/// The simple-signing payload cosign signs for the manifest `digest` in `repository`
/// of `registry`.
pub(crate) fn payload(registry: &str, repository: &str, digest: &str) -> SimpleSigning {
    let mut claim = SimpleSigning::new(
        &OciReference::with_digest(
            registry.to_owned(),
            repository.to_owned(),
            digest.to_owned(),
        ),
        digest,
    );
    claim.critical.identity.docker_reference = format!("{registry}/{repository}");
    claim
}

/// The payload bytes cosign signs for the manifest `digest` in `repository`.
pub fn payload_bytes(repository: &Reference, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&payload(
        repository.registry(),
        repository.repository(),
        digest,
    ))
    .unwrap_or_default()
}

/// `sha256:<hex>` of `bytes`.
fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

/// Whether `e` says the manifest is not there.
fn manifest_unknown(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| e.code == OciErrorCode::ManifestUnknown),
        _ => false,
    }
}
