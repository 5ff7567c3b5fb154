//! Checking the signatures stored beside an artifact against a node's trusted keys and
//! keyless identities.

use std::time::Duration;

use std::collections::HashSet;

use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor,
    OciImageIndex, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client as OciClient, Reference};
use sigstore::cosign::payload::SimpleSigning;

use super::{
    BUNDLE_ANNOTATION, CERTIFICATE_ANNOTATION, SIGNATURE_ANNOTATION, SIMPLE_SIGNING,
    manifest_unknown, payload_bytes, sha256_digest, signature_reference,
};
use crate::bundle::{MEDIA_TYPE_PREFIX, Refusal, Subject};
use crate::error::VerifyError;
use crate::keyless::{Evidence, certificate_der, rekor};
use crate::verify::{Verified, Verifier};

/// How long looking up signatures may take.
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest signature layer or bundle read.
const MAX_PAYLOAD: i64 = 1 << 20;
/// The most Sigstore bundles looked at for one manifest.
const MAX_BUNDLES: usize = 16;

impl Verifier {
    /// Verifies the artifact in `repository` (a reference in it: its registry and
    /// repository are what count) whose manifest has `manifest_digest`: one of its cosign
    /// signatures must be by a trusted key or identity — at cosign's tag
    /// (`sha256-<hex>.sig`, one request through the caller's `client`, which keeps its
    /// registry session, when the payload is the one cosign writes), else among the
    /// Sigstore bundles referring to the manifest (cosign 3's default). The error says
    /// what was found instead.
    pub async fn verify_artifact(
        &self,
        client: &OciClient,
        auth: &RegistryAuth,
        repository: &Reference,
        manifest_digest: &str,
    ) -> Result<Verified, VerifyError> {
        let repo = format!("{}/{}", repository.registry(), repository.repository());
        let signatures = signature_reference(repository, manifest_digest);
        let tag = signatures.tag().unwrap_or_default().to_owned();
        let lookup = self.lookup(client, auth, repository, &signatures, manifest_digest);
        let found = tokio::time::timeout(VERIFY_TIMEOUT, lookup)
            .await
            .map_err(|_| VerifyError::Lookup {
                artifact: format!("{repo}@{manifest_digest}"),
                message: format!("no answer within {}s", VERIFY_TIMEOUT.as_secs()),
            })?
            .map_err(|message| VerifyError::Lookup {
                artifact: format!("{repo}@{manifest_digest}"),
                message,
            })?;
        match found {
            Lookup::Signed(v) => Ok(v),
            Lookup::Unsigned => Err(VerifyError::NotSigned(format!(
                "no cosign signature of {repo}@{manifest_digest} (looked for {repo}:{tag} and Sigstore bundles referring to it)"
            ))),
            Lookup::Untrusted {
                signatures,
                bundles,
                foreign,
                refused,
            } => {
                let signatures = match bundles {
                    0 => format!(
                        "{signatures} signature(s) of {repo}@{manifest_digest} at {repo}:{tag}"
                    ),
                    b => format!(
                        "{signatures} signature(s) of {repo}@{manifest_digest} at {repo}:{tag} and {b} Sigstore bundle(s) referring to it"
                    ),
                };
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
                Err(VerifyError::Untrusted(format!(
                    "not signed by a trusted key or identity: {signatures}{copied}, none by a trusted {}{keyless}",
                    self.trusted()
                )))
            }
        }
    }

    /// The signatures at cosign's tag `signatures` and the Sigstore bundles referring
    /// to the manifest: first where this repository's signatures were found last time
    /// (cosign's tag until then), the other only when that finds none trusted.
    async fn lookup(
        &self,
        client: &OciClient,
        auth: &RegistryAuth,
        repository: &Reference,
        signatures: &Reference,
        manifest_digest: &str,
    ) -> Result<Lookup, String> {
        let repo = format!("{}/{}", repository.registry(), repository.repository());
        let bundles_first = self.learned().bundled.contains(&repo);
        let tagged = || self.signed_by(client, auth, signatures, manifest_digest);
        let referring = || self.bundles_of(client, auth, repository, manifest_digest);
        let (first, from_bundles) = if bundles_first {
            (referring().await, true)
        } else {
            (tagged().await, false)
        };
        let found = match first {
            Ok(Lookup::Signed(v)) => Ok((Lookup::Signed(v), from_bundles)),
            first => {
                let second = if bundles_first {
                    tagged().await
                } else {
                    referring().await
                };
                either(first, second).map(|l| (l, !from_bundles))
            }
        };
        if let Ok((Lookup::Signed(_), by_bundle)) = &found {
            let mut learned = self.learned();
            if *by_bundle {
                learned.bundled.insert(repo);
            } else {
                learned.bundled.remove(&repo);
            }
        }
        found.map(|(l, _)| l)
    }

    fn learned(&self) -> std::sync::MutexGuard<'_, Learned> {
        self.learned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The Sigstore bundles referring to the manifest, checked: from the referrers tag
    /// `sha256-<hex>` (registries without the referrers API, where cosign writes it),
    /// else from the OCI referrers API — the API first on a registry where it answered
    /// before.
    async fn bundles_of(
        &self,
        client: &OciClient,
        auth: &RegistryAuth,
        repository: &Reference,
        manifest_digest: &str,
    ) -> Result<Lookup, String> {
        let (registry, repo) = (repository.registry(), repository.repository());
        let subject = Reference::with_digest(
            registry.to_owned(),
            repo.to_owned(),
            manifest_digest.to_owned(),
        );
        let index = self.referrers(client, auth, &subject).await?;
        let (mut bundles, mut foreign, mut refused) = (0, 0, Vec::new());
        let referrers = index.manifests.iter().filter(|m| {
            m.artifact_type
                .as_deref()
                .is_some_and(|t| t.starts_with(MEDIA_TYPE_PREFIX))
        });
        for referrer in referrers.take(MAX_BUNDLES) {
            let at = Reference::with_digest(
                registry.to_owned(),
                repo.to_owned(),
                referrer.digest.clone(),
            );
            let (raw, _) = client
                .pull_manifest_raw(&at, auth, &[OCI_IMAGE_MEDIA_TYPE])
                .await
                .map_err(|e| format!("{at}: {e}"))?;
            let manifest: OciImageManifest = serde_json::from_slice(&raw)
                .map_err(|e| format!("{at}: not an image manifest: {e}"))?;
            for layer in manifest
                .layers
                .iter()
                .filter(|l| l.media_type.starts_with(MEDIA_TYPE_PREFIX))
            {
                let json = pull_payload(client, &at, layer).await?;
                bundles += 1;
                match self.verify_sigstore_bundle(&json, Subject::Manifest(manifest_digest)) {
                    Ok(v) => return Ok(Lookup::Signed(v)),
                    Err(Refusal::Foreign) => foreign += 1,
                    Err(Refusal::Untrusted(Some(why))) => refused.push(why),
                    Err(Refusal::Untrusted(None)) => {}
                }
            }
        }
        Ok(if bundles == 0 {
            Lookup::Unsigned
        } else {
            Lookup::Untrusted {
                signatures: 0,
                bundles,
                foreign,
                refused,
            }
        })
    }

    /// The referrers index of `subject`: the referrers tag, else the referrers API (the
    /// API alone on a registry where it answered before).
    async fn referrers(
        &self,
        client: &OciClient,
        auth: &RegistryAuth,
        subject: &Reference,
    ) -> Result<OciImageIndex, String> {
        let registry = subject.registry().to_owned();
        let failed = |e: &dyn std::fmt::Display| format!("the referrers of {subject}: {e}");
        if !self.learned().referrers_api.contains(&registry) {
            let tag = Reference::with_tag(
                registry.clone(),
                subject.repository().to_owned(),
                subject.digest().unwrap_or_default().replace(':', "-"),
            );
            match client
                .pull_manifest_raw(&tag, auth, &[OCI_IMAGE_INDEX_MEDIA_TYPE])
                .await
            {
                Ok((raw, _)) => return serde_json::from_slice(&raw).map_err(|e| failed(&e)),
                Err(e) if manifest_unknown(&e) => {}
                Err(e) => return Err(failed(&e)),
            }
        }
        client.store_auth_if_needed(&registry, auth).await;
        let index = client
            .pull_referrers(subject, None)
            .await
            .map_err(|e| failed(&e))?;
        if !index.manifests.is_empty() {
            self.learned().referrers_api.insert(registry);
        }
        Ok(index)
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
                bundles: 0,
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
        let certificate = certificate_der(certificate.as_bytes())?;
        self.by_identity(
            payload,
            Evidence {
                signature,
                certificate: &certificate,
                bundle: &bundle,
                dsse_payload: None,
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
        /// At cosign's tag.
        signatures: usize,
        /// Sigstore bundles referring to the manifest.
        bundles: usize,
        foreign: usize,
        /// Why keyless signatures among them were refused.
        refused: Vec<String>,
    },
}

/// What a verifier learned about where signatures are.
#[derive(Debug, Default)]
pub(crate) struct Learned {
    /// Repositories (`registry/repository`) whose last verified signature was a
    /// Sigstore bundle referring to the artifact.
    bundled: HashSet<String>,
    /// Registries whose referrers API listed referrers.
    referrers_api: HashSet<String>,
}

/// What two lookups found together, when the second may have failed: a failure does
/// not replace untrusted signatures the first found.
fn either(first: Result<Lookup, String>, second: Result<Lookup, String>) -> Result<Lookup, String> {
    match (first, second) {
        (Ok(a), Ok(b)) => Ok(a.and(b)),
        (Ok(found @ Lookup::Untrusted { .. }), Err(_))
        | (Err(_), Ok(found @ Lookup::Untrusted { .. })) => Ok(found),
        (Ok(Lookup::Signed(v)), _) | (_, Ok(Lookup::Signed(v))) => Ok(Lookup::Signed(v)),
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

impl Lookup {
    /// What two lookups found together.
    fn and(self, other: Lookup) -> Lookup {
        match (self, other) {
            (Lookup::Signed(v), _) | (_, Lookup::Signed(v)) => Lookup::Signed(v),
            (Lookup::Unsigned, Lookup::Unsigned) => Lookup::Unsigned,
            (Lookup::Unsigned, found) | (found, Lookup::Unsigned) => found,
            (
                Lookup::Untrusted {
                    signatures,
                    bundles,
                    foreign,
                    mut refused,
                },
                Lookup::Untrusted {
                    signatures: s,
                    bundles: b,
                    foreign: f,
                    refused: r,
                },
            ) => {
                refused.extend(r);
                Lookup::Untrusted {
                    signatures: signatures + s,
                    bundles: bundles + b,
                    foreign: foreign + f,
                    refused,
                }
            }
        }
    }
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
