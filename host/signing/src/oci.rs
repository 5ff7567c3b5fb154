//! Signatures of artifacts in an OCI registry, where cosign keeps them: a manifest
//! tagged `sha256-<hex of the artifact's manifest digest>.sig` in the artifact's
//! repository, one layer per signature (the simple-signing payload, its signature in
//! the layer's `dev.cosignproject.cosign/signature` annotation).

use std::time::Duration;

use sigstore::cosign::constraint::PrivateKeySigner;
use sigstore::cosign::{ClientBuilder, Constraint, CosignCapabilities, SignatureLayer};
use sigstore::crypto::SigStoreSigner;
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

    /// The manifest digest `reference` names now (`REGISTRY/REPO:TAG`).
    pub async fn resolve(&self, reference: &str) -> Result<String, String> {
        let text = reference.strip_prefix("oci://").unwrap_or(reference);
        let image: OciReference = text
            .parse()
            .map_err(|e| format!("{reference}: not an OCI reference: {e}"))?;
        let (_, digest) = self
            .client()?
            .triangulate(&image, &self.auth())
            .await
            .map_err(|e| format!("{text}: {e}"))?;
        Ok(digest)
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

impl Verifier {
    /// Verifies the artifact in `repository` (`REGISTRY/REPO`) whose manifest has
    /// `manifest_digest`: one of its cosign signatures must be by a trusted key. The
    /// error says what was found instead.
    pub async fn verify_artifact(
        &self,
        registry: &Registry,
        repository: &str,
        manifest_digest: &str,
    ) -> Result<Verified, String> {
        let image: OciReference = format!("{repository}@{manifest_digest}")
            .parse()
            .map_err(|e| format!("{repository}@{manifest_digest}: not an OCI reference: {e}"))?;
        let sig_tag = format!("{}.sig", manifest_digest.replace(':', "-"));
        let mut client = registry.client()?;
        let auth = registry.auth();
        let lookup = client.trusted_signature_layers(&auth, &image);
        let layers = tokio::time::timeout(VERIFY_TIMEOUT, lookup)
            .await
            .map_err(|_| {
                format!(
                    "looking up the signatures of {repository}@{manifest_digest}: no answer within {}s",
                    VERIFY_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("looking up the signatures of {repository}@{manifest_digest}: {e}"))?;
        if layers.is_empty() {
            return Err(format!(
                "not signed: no cosign signature of {repository}@{manifest_digest} (looked for {repository}:{sig_tag})"
            ));
        }
        self.signer_of(&layers).ok_or_else(|| {
            format!(
                "not signed by a trusted key: {} signature(s) of {repository}@{manifest_digest} at {repository}:{sig_tag}, none by {}",
                layers.len(),
                self.key_ids()
            )
        })
    }
}
