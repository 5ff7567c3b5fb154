//! Storing signatures: a signature layer added to the artifact's signature manifest,
//! the layers already there kept as they are (other signers', keyless ones included),
//! as `cosign sign` adds one.

use std::collections::BTreeMap;

use http::HeaderValue;
use oci_client::client::Config;
use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client as OciClient, Reference, RegistryOperation};
use sigstore::crypto::SigStoreSigner;

use crate::error::RegistryError;

use super::{
    Registry, SIGNATURE_ANNOTATION, SIMPLE_SIGNING, manifest_unknown, payload_bytes, sha256_digest,
    signature_reference,
};

/// What a signing stored.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The artifact's manifest digest the signature names.
    pub manifest_digest: String,
    /// Where the signature is: `REGISTRY/REPO:sha256-<hex>.sig`.
    pub signature: String,
}

impl Registry {
    /// Signs the artifact `reference` (`REGISTRY/REPO:TAG` or `@sha256:…`, `oci://`
    /// allowed) with `signer` and stores the signature beside it, keeping the
    /// signatures already there.
    pub async fn sign(
        &self,
        reference: &str,
        signer: &SigStoreSigner,
    ) -> Result<Signed, RegistryError> {
        let (client, auth) = self.oci();
        let (image, digest) = resolve(&client, &auth, reference).await?;
        let payload = payload_bytes(&image, &digest);
        let signature = crate::keys::sign_blob(signer, &payload)?;
        let annotations = BTreeMap::from([(SIGNATURE_ANNOTATION.to_owned(), signature)]);
        let stored = attach(&client, &auth, &image, &digest, payload, annotations).await?;
        Ok(Signed {
            manifest_digest: digest,
            signature: stored.whole(),
        })
    }
}

/// The artifact `reference` names (`REGISTRY/REPO:TAG` or `@sha256:…`, `oci://`
/// allowed) and its manifest digest: the one it pins, else the tag's now.
pub async fn resolve(
    client: &OciClient,
    auth: &RegistryAuth,
    reference: &str,
) -> Result<(Reference, String), RegistryError> {
    let text = reference.strip_prefix("oci://").unwrap_or(reference);
    let image: Reference = text.parse().map_err(|source| RegistryError::Reference {
        reference: reference.to_owned(),
        source,
    })?;
    let digest = match image.digest() {
        Some(d) => d.to_owned(),
        None => client
            .fetch_manifest_digest(&image, auth)
            .await
            .map_err(|source| RegistryError::Digest {
                reference: text.to_owned(),
                source,
            })?,
    };
    Ok((image, digest))
}

/// Adds a signature layer (`payload`, its `annotations`) to the signatures of the
/// manifest `digest` in `image`'s repository; returns where they are.
pub async fn attach(
    client: &OciClient,
    auth: &RegistryAuth,
    image: &Reference,
    digest: &str,
    payload: Vec<u8>,
    annotations: BTreeMap<String, String>,
) -> Result<Reference, RegistryError> {
    let target = signature_reference(image, digest);
    let failed = |e: Box<dyn std::error::Error + Send + Sync>| RegistryError::Store {
        target: target.whole(),
        source: e,
    };
    client
        .auth(&target, auth, RegistryOperation::Push)
        .await
        .map_err(|e| failed(e.into()))?;
    let mut manifest = match client
        .pull_manifest_raw(
            &target,
            auth,
            &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
        )
        .await
    {
        Ok((raw, _)) => serde_json::from_slice::<OciImageManifest>(&raw).map_err(|e| {
            failed(format!("the manifest there is not an image manifest ({e})").into())
        })?,
        Err(e) if manifest_unknown(&e) => {
            let config = Config::oci_v1(b"{}".to_vec(), None);
            let digest = sha256_digest(&config.data);
            client
                .push_blob(&target, config.data.clone(), &digest)
                .await
                .map_err(|e| failed(e.into()))?;
            OciImageManifest::build(&[], &config, None)
        }
        Err(e) => return Err(failed(e.into())),
    };
    let layer = OciDescriptor {
        media_type: SIMPLE_SIGNING.to_owned(),
        digest: sha256_digest(&payload),
        size: i64::try_from(payload.len()).unwrap_or(i64::MAX),
        annotations: Some(annotations),
        ..Default::default()
    };
    let present = manifest
        .layers
        .iter()
        .any(|l| l.digest == layer.digest && l.annotations == layer.annotations);
    if !present {
        client
            .push_blob(&target, payload, &layer.digest)
            .await
            .map_err(|e| failed(e.into()))?;
        manifest.layers.push(layer);
        manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_owned());
        // Plain JSON: the client's canonical form leaves the newlines of a PEM
        // certificate unescaped, which registries refuse as invalid JSON.
        let body = serde_json::to_vec(&manifest).map_err(|e| failed(e.into()))?;
        client
            .push_manifest_raw(
                &target,
                body,
                HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
            )
            .await
            .map_err(|e| failed(e.into()))?;
    }
    Ok(target)
}
