//! Signatures of artifacts in an OCI registry, where cosign keeps them: a manifest
//! tagged `sha256-<hex of the artifact's manifest digest>.sig` in the artifact's
//! repository, one layer per signature (the simple-signing payload, its signature in
//! the layer's `dev.cosignproject.cosign/signature` annotation).

use std::time::Duration;

use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client as OciClient, Reference};
use sha2::Digest as _;
use sigstore::cosign::constraint::PrivateKeySigner;
use sigstore::cosign::payload::SimpleSigning;
use sigstore::cosign::{ClientBuilder, Constraint, CosignCapabilities, SignatureLayer};
use sigstore::crypto::SigStoreSigner;
use sigstore::crypto::Signature;
use sigstore::registry::{Auth, ClientConfig, ClientProtocol, OciReference};

use crate::{Verified, Verifier};

/// How to reach a registry: plain HTTP or HTTPS, and with which credentials.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Plain HTTP (a registry on loopback without TLS).
    pub insecure: bool,
    /// User and password; anonymous without.
    pub credentials: Option<(String, String)>,
}

/// What a signing stored.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The artifact's manifest digest the signature names.
    pub manifest_digest: String,
    /// Where the signature is: `REGISTRY/REPO:sha256-<hex>.sig`.
    pub signature: String,
}

impl Registry {
    fn auth(&self) -> Auth {
        match &self.credentials {
            Some((user, password)) => Auth::Basic(user.clone(), password.clone()),
            None => Auth::Anonymous,
        }
    }

    fn client(&self) -> Result<sigstore::cosign::Client, String> {
        let config = ClientConfig {
            protocol: if self.insecure {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            ..Default::default()
        };
        ClientBuilder::default()
            .with_oci_client_config(config)
            .build()
            .map_err(|e| format!("making a registry client: {e}"))
    }

    /// Signs the artifact `reference` (`REGISTRY/REPO:TAG` or `@sha256:…`, `oci://`
    /// allowed) with `signer` and stores the signature beside it, keeping the
    /// signatures already there.
    pub async fn sign(&self, reference: &str, signer: SigStoreSigner) -> Result<Signed, String> {
        let text = reference.strip_prefix("oci://").unwrap_or(reference);
        let image: OciReference = text
            .parse()
            .map_err(|e| format!("{reference}: not an OCI reference: {e}"))?;
        let mut client = self.client()?;
        let auth = self.auth();
        let (signature_ref, digest) = client
            .triangulate(&image, &auth)
            .await
            .map_err(|e| format!("{text}: {e}"))?;
        let pinned = pinned(&image, &digest);
        // Cosign adds a signature to those already stored; the ones this client cannot
        // read (none yet: the tag does not exist) are none.
        let mut layers = client
            .trusted_signature_layers(&auth, &pinned)
            .await
            .unwrap_or_default();
        let mut layer = SignatureLayer::new_unsigned(&image, &digest)
            .map_err(|e| format!("the payload for {text}: {e}"))?;
        // The repository without the tag, as cosign names what it signs.
        layer.simple_signing = payload(image.registry(), image.repository(), &digest);
        PrivateKeySigner::new_with_signer(signer)
            .add_constraint(&mut layer)
            .map_err(|e| format!("signing {text}: {e}"))?;
        layers.push(layer);
        client
            .push_signature(None, &auth, &signature_ref, layers)
            .await
            .map_err(|e| format!("storing the signature as {signature_ref}: {e}"))?;
        Ok(Signed {
            manifest_digest: digest,
            signature: signature_ref.to_string(),
        })
    }
}

/// `image`'s repository at `digest`.
fn pinned(image: &OciReference, digest: &str) -> OciReference {
    OciReference::with_digest(
        image.registry().to_owned(),
        image.repository().to_owned(),
        digest.to_owned(),
    )
}

/// How long looking up signatures may take.
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(30);

/// The media type of a cosign signature layer (a simple-signing payload).
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation of a signature layer that holds the signature, base64.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The largest signature layer read.
const MAX_PAYLOAD: i64 = 1 << 20;

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

impl Verifier {
    /// Verifies the artifact in `repository` (a reference in it: its registry and
    /// repository are what count) whose manifest has `manifest_digest`: one of its cosign
    /// signatures (the manifest tagged `sha256-<hex>.sig` beside it) must be by a trusted
    /// key. Two requests through the caller's `client` (which keeps its registry
    /// session): the signature manifest, then its layers. The error says what was found
    /// instead.
    pub async fn verify_artifact(
        &self,
        client: &OciClient,
        auth: &RegistryAuth,
        repository: &Reference,
        manifest_digest: &str,
    ) -> Result<Verified, String> {
        let repo = format!("{}/{}", repository.registry(), repository.repository());
        let tag = format!("{}.sig", manifest_digest.replace(':', "-"));
        let signatures = Reference::with_tag(
            repository.registry().to_owned(),
            repository.repository().to_owned(),
            tag.clone(),
        );
        let lookup = self.signed_by(client, auth, &signatures, manifest_digest);
        let found = tokio::time::timeout(VERIFY_TIMEOUT, lookup)
            .await
            .map_err(|_| {
                format!(
                    "looking up the signatures of {repo}@{manifest_digest}: no answer within {}s",
                    VERIFY_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("looking up the signatures of {repo}@{manifest_digest}: {e}"))?;
        match found {
            Lookup::Signed(v) => Ok(v),
            Lookup::Unsigned => Err(format!(
                "not signed: no cosign signature of {repo}@{manifest_digest} (looked for {repo}:{tag})"
            )),
            Lookup::Untrusted {
                signatures,
                foreign,
            } => {
                let copied = if foreign > 0 {
                    format!(" ({foreign} of them for another manifest)")
                } else {
                    String::new()
                };
                Err(format!(
                    "not signed by a trusted key: {signatures} signature(s) of {repo}@{manifest_digest} at {repo}:{tag}{copied}, none by {}",
                    self.key_ids()
                ))
            }
        }
    }

    /// Reads the signature manifest `signatures` and checks its layers.
    async fn signed_by(
        &self,
        client: &OciClient,
        auth: &RegistryAuth,
        signatures: &Reference,
        manifest_digest: &str,
    ) -> Result<Lookup, String> {
        let raw = match client
            .pull_manifest_raw(
                signatures,
                auth,
                &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
            )
            .await
        {
            Ok((raw, _)) => raw,
            Err(e) if manifest_unknown(&e) => return Ok(Lookup::Unsigned),
            Err(e) => return Err(e.to_string()),
        };
        let manifest: OciImageManifest = serde_json::from_slice(&raw)
            .map_err(|e| format!("{signatures}: not an image manifest: {e}"))?;
        let (mut layers, mut foreign) = (0, 0);
        for layer in &manifest.layers {
            let Some(signature) = signature_of(layer) else {
                continue;
            };
            layers += 1;
            let known = serde_json::to_vec(&payload(
                signatures.registry(),
                signatures.repository(),
                manifest_digest,
            ))
            .ok()
            .filter(|p| sha256_digest(p) == layer.digest);
            // The payload as cosign writes it for this artifact, when the layer is
            // exactly that (its digest says so): no request for it.
            let payload = match known {
                Some(p) => p,
                None => pull_payload(client, signatures, layer).await?,
            };
            // The payload must name this manifest: a signature copied from another
            // artifact's tag does not count.
            let claim: Option<SimpleSigning> = serde_json::from_slice(&payload).ok();
            if !claim.is_some_and(|c| c.satisfies_manifest_digest(manifest_digest)) {
                foreign += 1;
                continue;
            }
            if let Some(v) = self.verify_payload(&payload, signature) {
                return Ok(Lookup::Signed(v));
            }
        }
        Ok(if layers == 0 {
            Lookup::Unsigned
        } else {
            Lookup::Untrusted {
                signatures: layers,
                foreign,
            }
        })
    }

    /// The trusted key whose signature `signature` (base64) of `payload` verifies.
    fn verify_payload(&self, payload: &[u8], signature: &str) -> Option<Verified> {
        self.keys
            .iter()
            .find(|k| {
                k.key
                    .verify_signature(Signature::Base64Encoded(signature.as_bytes()), payload)
                    .is_ok()
            })
            .map(|k| Verified { key: k.id.clone() })
    }
}

/// What a signature lookup found.
enum Lookup {
    Signed(Verified),
    /// No signature at all.
    Unsigned,
    /// This many signatures, none by a trusted key; `foreign` of them name another
    /// manifest.
    Untrusted {
        signatures: usize,
        foreign: usize,
    },
}

/// The signature a layer carries, when it is a cosign signature layer.
fn signature_of(layer: &OciDescriptor) -> Option<&str> {
    if layer.media_type != SIMPLE_SIGNING {
        return None;
    }
    layer
        .annotations
        .as_ref()?
        .get(SIGNATURE_ANNOTATION)
        .map(String::as_str)
}

/// A signature layer's payload, checked against its digest.
async fn pull_payload(
    client: &OciClient,
    signatures: &Reference,
    layer: &OciDescriptor,
) -> Result<Vec<u8>, String> {
    if layer.size > MAX_PAYLOAD {
        return Err(format!(
            "{signatures}: a signature payload of {} bytes",
            layer.size
        ));
    }
    let mut payload = Vec::with_capacity(usize::try_from(layer.size).unwrap_or(0));
    client
        .pull_blob(signatures, layer, &mut payload)
        .await
        .map_err(|e| format!("{signatures}: {e}"))?;
    let digest = sha256_digest(&payload);
    if digest != layer.digest {
        return Err(format!(
            "{signatures}: a signature payload is {digest}, its manifest says {}",
            layer.digest
        ));
    }
    Ok(payload)
}

/// `sha256:<hex>` of `bytes`.
fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
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
