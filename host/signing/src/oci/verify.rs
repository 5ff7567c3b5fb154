//! Checking the signatures stored beside an artifact against a node's trusted keys and
//! keyless identities.

use std::time::Duration;

use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client as OciClient, Reference};
use sigstore::cosign::payload::SimpleSigning;

use super::{
    BUNDLE_ANNOTATION, CERTIFICATE_ANNOTATION, SIGNATURE_ANNOTATION, SIMPLE_SIGNING,
    manifest_unknown, payload_bytes, sha256_digest, signature_reference,
};
use crate::keyless::{Evidence, rekor};
use crate::{Verified, Verifier};

/// How long looking up signatures may take.
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest signature layer read.
const MAX_PAYLOAD: i64 = 1 << 20;

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
        let signatures = signature_reference(repository, manifest_digest);
        let tag = signatures.tag().unwrap_or_default().to_owned();
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
                refused,
            } => {
                let copied = if foreign > 0 {
                    format!(" ({foreign} of them for another manifest)")
                } else {
                    String::new()
                };
                let keyless = if refused.is_empty() {
                    String::new()
                } else {
                    format!("; keyless: {}", refused.join("; "))
                };
                Err(format!(
                    "not signed by a trusted key or identity: {signatures} signature(s) of {repo}@{manifest_digest} at {repo}:{tag}{copied}, none by a trusted {}{keyless}",
                    self.trusted()
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
        let expected = payload_bytes(signatures, manifest_digest);
        let (mut layers, mut foreign, mut refused) = (0, 0, Vec::new());
        for layer in &manifest.layers {
            let Some(signature) = annotation(layer, SIGNATURE_ANNOTATION) else {
                continue;
            };
            layers += 1;
            // The payload as cosign writes it for this artifact, when the layer is
            // exactly that (its digest says so): no request for it.
            let payload = if sha256_digest(&expected) == layer.digest {
                expected.clone()
            } else {
                pull_payload(client, signatures, layer).await?
            };
            // The payload must name this manifest: a signature copied from another
            // artifact's tag does not count.
            let claim: Option<SimpleSigning> = serde_json::from_slice(&payload).ok();
            if !claim.is_some_and(|c| c.satisfies_manifest_digest(manifest_digest)) {
                foreign += 1;
                continue;
            }
            match self.verify_layer(&payload, signature, layer) {
                Ok(v) => return Ok(Lookup::Signed(v)),
                Err(Some(reason)) => refused.push(reason),
                Err(None) => {}
            }
        }
        Ok(if layers == 0 {
            Lookup::Unsigned
        } else {
            Lookup::Untrusted {
                signatures: layers,
                foreign,
                refused,
            }
        })
    }

    /// Verifies one signature layer's `signature` of `payload`: by a trusted key, or
    /// keyless by its certificate and Rekor bundle. The error is why a keyless
    /// signature was refused (`None`: no key matched and it is not keyless).
    fn verify_layer(
        &self,
        payload: &[u8],
        signature: &str,
        layer: &OciDescriptor,
    ) -> Result<Verified, Option<String>> {
        if let Some(v) = self.by_key(payload, signature) {
            return Ok(v);
        }
        let (Some(certificate), Some(bundle)) = (
            annotation(layer, CERTIFICATE_ANNOTATION),
            annotation(layer, BUNDLE_ANNOTATION),
        ) else {
            return Err(None);
        };
        let bundle = rekor::Bundle::parse(bundle)?;
        self.by_identity(
            payload,
            Evidence {
                signature,
                certificate: certificate.as_bytes(),
                bundle: &bundle,
            },
        )
        .map_err(Some)
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
        /// Why keyless signatures among them were refused.
        refused: Vec<String>,
    },
}

/// An annotation of a cosign signature layer.
fn annotation<'a>(layer: &'a OciDescriptor, name: &str) -> Option<&'a str> {
    if layer.media_type != SIMPLE_SIGNING {
        return None;
    }
    layer.annotations.as_ref()?.get(name).map(String::as_str)
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
