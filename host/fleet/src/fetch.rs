//! Components fetched for WasmletPlugins: from an OCI registry (the layout the
//! WebAssembly ecosystem uses: one `application/wasm` layer, config
//! `application/vnd.wasm.config.v0+json`) with a pull secret's credentials, or from a
//! ConfigMap's `binaryData`; checked against the object's sha256, their signature
//! verified when the node asks for it ([`wasmlet_signing`]: cosign's signature of the
//! artifact's manifest in the registry, or of the bytes in the ConfigMap's `KEY.sig`),
//! and kept on the node by digest with what verified them, so a restart — or an API
//! server or registry that is gone — serves them from disk, verified once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1 as k8s;
use kube::Api;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client as OciClient, Reference};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::warn;
use wasmlet_signing::Verifier;

use crate::object::{Desired, Source};

/// The layer media type of a WebAssembly component artifact.
pub const WASM_LAYER: &str = "application/wasm";
/// Its config media type.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The layer media type of older wasm artifacts, also accepted.
const WASM_LAYER_V1: &str = "application/vnd.wasm.content.layer.v1+wasm";

/// How long one fetch may take before it counts as failed (the old version serves
/// meanwhile; nothing waits for it).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest component layer a node downloads.
pub const MAX_COMPONENT_BYTES: i64 = 256 << 20;

/// The sha256 of `bytes`, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Fetches and keeps components.
pub struct Fetcher {
    client: kube::Client,
    /// Where pull secrets and ConfigMaps are read.
    namespace: String,
    /// Components by digest: `<dir>/<sha256>.wasm`, and what verified them:
    /// `<dir>/<sha256>.verified`.
    dir: PathBuf,
    /// What signatures are checked against, when the node asks.
    verifier: Option<Arc<Verifier>>,
}

/// A component on the node, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Where it is.
    pub path: PathBuf,
    /// The key that signed it (its id), when the node verifies signatures and one did.
    pub verified: Option<String>,
}

/// What a node recorded about a component's signature (`<sha256>.verified`).
#[derive(Debug, Serialize, Deserialize)]
struct Verification {
    /// The verifier's fingerprint when it was checked.
    fingerprint: String,
    /// The key that signed it; none when nothing did (and nothing was required).
    key: Option<String>,
}

/// Where a downloaded component's signature is.
enum Provenance {
    /// Cosign's signature of the manifest in the registry, read with the client and
    /// credentials the component was pulled with.
    Oci {
        client: OciClient,
        auth: RegistryAuth,
        reference: Reference,
        manifest_digest: String,
    },
    /// A blob signature beside the bytes (a ConfigMap's `KEY.sig`), if any.
    Blob {
        signature: Option<String>,
        what: String,
    },
}

/// The process's rustls crypto provider (ring), once: the OCI client's TLS takes it, and
/// so does kube's client (rustls, with sigstore's aws-lc-rs compiled in as well, will not
/// choose one itself).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Fetcher {
    /// A fetcher keeping components in `dir`, reading pull secrets and ConfigMaps from
    /// `namespace`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        dir: &Path,
        verifier: Option<Arc<Verifier>>,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        install_crypto_provider();
        Ok(Self {
            client,
            namespace: namespace.to_owned(),
            dir: dir.to_owned(),
            verifier,
        })
    }

    /// Where components are kept.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the component with `sha256` is kept.
    pub fn path(dir: &Path, sha256: &str) -> PathBuf {
        dir.join(format!("{sha256}.wasm"))
    }

    /// The component `desired` names, on disk and checked: from the node's store when it
    /// is there (and was verified as the node asks now), else fetched and verified. The
    /// error says what went wrong, naming the source.
    pub async fn fetch(&self, desired: &Desired) -> Result<Fetched, FetchError> {
        let path = Self::path(&self.dir, &desired.sha256);
        if let Ok(bytes) = tokio::fs::read(&path).await
            && sha256_hex(&bytes) == desired.sha256
            && let Some(verified) = self.recorded(&desired.sha256)
        {
            return Ok(Fetched { path, verified });
        }
        let (bytes, provenance) = tokio::time::timeout(
            FETCH_TIMEOUT,
            self.download(&desired.source, &desired.sha256),
        )
        .await
        .map_err(|_| FetchError::Timeout {
            what: describe(&desired.source, &self.namespace),
            within: FETCH_TIMEOUT,
        })?
        .map_err(FetchError::Source)?;
        let got = sha256_hex(&bytes);
        if got != desired.sha256 {
            return Err(FetchError::Digest {
                what: describe(&desired.source, &self.namespace),
                got,
                pinned: desired.sha256.clone(),
            });
        }
        let verified = self
            .verify(&provenance, &bytes)
            .await
            .map_err(FetchError::Refused)?;
        // Written whole, then renamed: a reader never sees half a component.
        let partial = self.dir.join(format!(".{}.partial", desired.sha256));
        tokio::fs::write(&partial, &bytes)
            .await
            .and(tokio::fs::rename(&partial, &path).await)
            .map_err(|source| FetchError::Keep {
                dir: self.dir.clone(),
                source,
            })?;
        self.record(&desired.sha256, &verified);
        Ok(Fetched { path, verified })
    }

    /// What verified the stored component `sha256` under the node's present verifier:
    /// `Some(key)` when that is known (`Some(None)`: nothing to verify, or nothing
    /// signed it and nothing is required), `None` when it has to be verified (again).
    fn recorded(&self, sha256: &str) -> Option<Option<String>> {
        let Some(verifier) = &self.verifier else {
            return Some(None);
        };
        let text = std::fs::read(self.dir.join(format!("{sha256}.verified"))).ok()?;
        let v: Verification = serde_json::from_slice(&text).ok()?;
        (v.fingerprint == verifier.fingerprint()).then_some(v.key)
    }

    /// Records what verified the stored component `sha256`.
    fn record(&self, sha256: &str, key: &Option<String>) {
        let Some(verifier) = &self.verifier else {
            return;
        };
        let record = Verification {
            fingerprint: verifier.fingerprint().to_owned(),
            key: key.clone(),
        };
        let file = self.dir.join(format!("{sha256}.verified"));
        let written = serde_json::to_vec(&record)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&file, bytes));
        if let Err(e) = written {
            warn!(file = %file.display(), error = %e, "recording a component's verification failed; it is verified again at its next load");
        }
    }

    /// Checks the signature of a downloaded component as the node asks: the key that
    /// signed it, or why it is refused (only when signatures are required; otherwise
    /// an unverified component is said and loads).
    async fn verify(
        &self,
        provenance: &Provenance,
        bytes: &[u8],
    ) -> Result<Option<String>, wasmlet_signing::VerifyError> {
        let Some(verifier) = &self.verifier else {
            return Ok(None);
        };
        let result = match provenance {
            Provenance::Oci {
                client,
                auth,
                reference,
                manifest_digest,
            } => {
                verifier
                    .verify_artifact(client, auth, reference, manifest_digest)
                    .await
            }
            Provenance::Blob {
                signature: Some(signature),
                ..
            } => verifier.verify_blob(bytes, signature),
            Provenance::Blob {
                signature: None,
                what,
            } => Err(wasmlet_signing::VerifyError::NotSigned(format!(
                "{what} has no signature beside it"
            ))),
        };
        match result {
            Ok(v) => Ok(Some(v.signer)),
            Err(e) if verifier.required() => Err(e),
            Err(e) => {
                warn!(reason = %e, "a cluster plugin's signature does not verify; loading it anyway (clusterPlugins.verification.required is false)");
                Ok(None)
            }
        }
    }

    /// The component's bytes from `source` and where its signature is; an OCI layer
    /// must be the one with `sha256` in the manifest.
    async fn download(
        &self,
        source: &Source,
        sha256: &str,
    ) -> Result<(Vec<u8>, Provenance), String> {
        let what = describe(source, &self.namespace);
        match source {
            Source::ConfigMap { name, key } => self.config_map(name, key, &what).await,
            Source::Oci {
                reference,
                pull_secret,
                insecure,
            } => {
                let parsed: Reference = reference
                    .parse()
                    .map_err(|e| format!("{what}: not an OCI reference: {e}"))?;
                let auth = match pull_secret {
                    Some(secret) => self.auth(secret, parsed.resolve_registry()).await?,
                    None => RegistryAuth::Anonymous,
                };
                let client = oci_client(*insecure, parsed.resolve_registry(), &auth);
                let (bytes, manifest_digest) =
                    pull_component(&client, &parsed, &auth, sha256, &what).await?;
                let provenance = Provenance::Oci {
                    client,
                    auth,
                    reference: parsed,
                    manifest_digest,
                };
                Ok((bytes, provenance))
            }
        }
    }

    /// The ConfigMap's `key` and its blob signature (`KEY.sig`, if there is one).
    async fn config_map(
        &self,
        name: &str,
        key: &str,
        what: &str,
    ) -> Result<(Vec<u8>, Provenance), String> {
        let api: Api<k8s::ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let cm = api
            .get_opt(name)
            .await
            .map_err(|e| format!("{what}: {e}"))?
            .ok_or_else(|| format!("{what}: the ConfigMap does not exist"))?;
        let signature_key = format!("{key}.sig");
        let signature = cm
            .binary_data
            .as_ref()
            .and_then(|d| d.get(&signature_key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .or_else(|| {
                cm.data
                    .as_ref()
                    .and_then(|d| d.get(&signature_key))
                    .cloned()
            });
        if let Some(b) = cm.binary_data.as_ref().and_then(|d| d.get(key)) {
            let provenance = Provenance::Blob {
                signature,
                what: what.to_owned(),
            };
            return Ok((b.0.clone(), provenance));
        }
        if cm.data.as_ref().is_some_and(|d| d.contains_key(key)) {
            return Err(format!(
                "{what}: the key is in data, not binaryData (a component is binary: kubectl create configmap --from-file puts it in binaryData)"
            ));
        }
        Err(format!(
            "{what}: the ConfigMap has no binaryData key {key:?}"
        ))
    }

    /// The credentials for `registry` in pull secret `name`.
    async fn auth(&self, name: &str, registry: &str) -> Result<RegistryAuth, String> {
        let what = format!("pull secret {}/{name}", self.namespace);
        let api: Api<k8s::Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret = cached_get(&api, name)
            .await
            .map_err(|e| format!("{what}: {e}"))?
            .ok_or_else(|| format!("{what}: the Secret does not exist"))?;
        let config = secret
            .data
            .as_ref()
            .and_then(|d| d.get(".dockerconfigjson"))
            .ok_or_else(|| {
                format!("{what}: no .dockerconfigjson (a kubernetes.io/dockerconfigjson Secret)")
            })?;
        docker_auth(&config.0, registry).map_err(|e| format!("{what}: {e}"))
    }
}

/// Object `name` as the API server's watch cache has it (`resourceVersion=0`: no read
/// from etcd, which every node fetching in a rollout would otherwise cost, as the
/// kubelet's secret manager spares it), or from etcd when the cache has not seen it yet.
async fn cached_get<K>(api: &Api<K>, name: &str) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_with(name, &kube::api::GetParams::any()).await {
        Ok(o) => Ok(Some(o)),
        Err(kube::Error::Api(e)) if e.code == 404 => api.get_opt(name).await,
        Err(e) => Err(e),
    }
}

/// The component layer of the artifact `reference`, and the digest of the manifest that
/// lists it: the manifest's bytes are hashed here (that digest is what a signature
/// names), its one layer must be the component with `sha256`.
async fn pull_component(
    client: &OciClient,
    reference: &Reference,
    auth: &RegistryAuth,
    sha256: &str,
    what: &str,
) -> Result<(Vec<u8>, String), String> {
    let (raw, _) = client
        .pull_manifest_raw(
            reference,
            auth,
            &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
        )
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    let manifest_digest = format!("sha256:{}", sha256_hex(&raw));
    if let Some(pinned) = reference.digest()
        && pinned != manifest_digest
    {
        return Err(format!(
            "{what}: the registry sent a manifest with digest {manifest_digest}"
        ));
    }
    let manifest: OciImageManifest =
        serde_json::from_slice(&raw).map_err(|e| format!("{what}: not an image manifest: {e}"))?;
    // The config blob says nothing a node uses, so it is not fetched.
    let layer = match manifest.layers.as_slice() {
        [layer] if [WASM_LAYER, WASM_LAYER_V1].contains(&layer.media_type.as_str()) => layer,
        layers => {
            let types: Vec<&str> = layers.iter().map(|l| l.media_type.as_str()).collect();
            return Err(format!(
                "{what}: a component artifact has exactly one {WASM_LAYER} layer; this one has {types:?}"
            ));
        }
    };
    if layer.digest != format!("sha256:{sha256}") {
        return Err(format!(
            "digest mismatch: {what} is {}, the object pins sha256:{sha256}",
            layer.digest
        ));
    }
    if layer.size > MAX_COMPONENT_BYTES {
        return Err(format!(
            "{what}: the component layer is {} bytes, more than a node takes ({MAX_COMPONENT_BYTES})",
            layer.size
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(layer.size).unwrap_or(0));
    client
        .pull_blob(reference, layer, &mut bytes)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    Ok((bytes, manifest_digest))
}

/// An OCI client for pulls from `registry` with `auth`: one per protocol, registry and
/// credentials in the process. An OCI client keeps the first credentials it is given
/// for a registry, so one plugin's pull secret must never serve another's pull; a
/// client per pull would read the machine's root certificates every time (hollow nodes
/// in one process share them).
fn oci_client(insecure: bool, registry: &str, auth: &RegistryAuth) -> OciClient {
    static CLIENTS: std::sync::LazyLock<std::sync::Mutex<HashMap<String, OciClient>>> =
        std::sync::LazyLock::new(Default::default);
    let who = match auth {
        RegistryAuth::Anonymous => String::new(),
        RegistryAuth::Basic(user, password) => {
            sha256_hex(format!("basic\0{user}\0{password}").as_bytes())
        }
        RegistryAuth::Bearer(token) => sha256_hex(format!("bearer\0{token}").as_bytes()),
    };
    let key = format!("{insecure} {registry} {who}");
    let mut clients = CLIENTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    clients
        .entry(key)
        .or_insert_with(|| {
            OciClient::new(ClientConfig {
                protocol: if insecure {
                    ClientProtocol::Http
                } else {
                    ClientProtocol::Https
                },
                connect_timeout: Some(Duration::from_secs(10)),
                read_timeout: Some(Duration::from_secs(30)),
                platform_resolver: None,
                ..Default::default()
            })
        })
        .clone()
}

/// Why a component could not be fetched, naming its source.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The source did not answer in time.
    #[error("{what}: no answer within {}s", within.as_secs())]
    Timeout {
        /// The source (`oci://REF`, `ConfigMap NS/NAME key KEY`).
        what: String,
        /// How long it was given.
        within: Duration,
    },
    /// The source could not be read (its message names it).
    #[error("{0}")]
    Source(String),
    /// The bytes are not the ones the object pins.
    #[error("digest mismatch: {what} is sha256:{got}, the object pins sha256:{pinned}")]
    Digest {
        /// The source.
        what: String,
        /// The digest of what came.
        got: String,
        /// The digest the object names.
        pinned: String,
    },
    /// Its signature is missing or does not verify, and the node requires one.
    #[error("signature refused: {0}")]
    Refused(#[source] wasmlet_signing::VerifyError),
    /// The node's store could not keep it.
    #[error("keeping the component in {}: {source}", dir.display())]
    Keep {
        /// The store.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Credentials that cannot be read from a `.dockerconfigjson`.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file is not JSON.
    #[error(".dockerconfigjson is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// No entry names the registry.
    #[error("no credentials for {0}")]
    NoCredentials(String),
    /// The registry's entry is unusable.
    #[error("the entry for {registry} {problem}")]
    Entry {
        /// The registry.
        registry: String,
        /// What is wrong with its entry.
        problem: &'static str,
    },
}

/// The credentials for `registry` in a `.dockerconfigjson`: `username`/`password`, or
/// `auth` (base64 of `user:password`).
pub fn docker_auth(config: &[u8], registry: &str) -> Result<RegistryAuth, AuthError> {
    let config: serde_json::Value = serde_json::from_slice(config).map_err(AuthError::NotJson)?;
    let auths = config["auths"].as_object().cloned().unwrap_or_default();
    let entry = auths
        .iter()
        .find(|(k, _)| {
            let host = k
                .trim_start_matches("https://")
                .trim_start_matches("http://")
                .split('/')
                .next()
                .unwrap_or_default();
            host == registry
        })
        .map(|(_, v)| v)
        .ok_or_else(|| AuthError::NoCredentials(registry.to_owned()))?;
    if let (Some(user), Some(password)) = (entry["username"].as_str(), entry["password"].as_str()) {
        return Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
    }
    let bad = |problem| AuthError::Entry {
        registry: registry.to_owned(),
        problem,
    };
    let auth = entry["auth"]
        .as_str()
        .ok_or_else(|| bad("has neither username/password nor auth"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth)
        .map_err(|_| bad("has an auth that is not base64"))?;
    let text = String::from_utf8(decoded).map_err(|_| bad("has an auth that is not text"))?;
    let (user, password) = text
        .split_once(':')
        .ok_or_else(|| bad("has an auth that is not user:password"))?;
    Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()))
}

/// The source, for messages: `oci://REF` or `ConfigMap NS/NAME key KEY`.
pub fn describe(source: &Source, namespace: &str) -> String {
    match source {
        Source::Oci { reference, .. } => format!("oci://{reference}"),
        Source::ConfigMap { name, key } => format!("ConfigMap {namespace}/{name} key {key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_secrets_give_basic_credentials_for_their_registry() {
        let config = br#"{"auths": {"127.0.0.1:5000": {"auth": "YWxpY2U6czNjcmV0"}, "https://reg.example/v1/": {"username": "bob", "password": "pw"}}}"#;
        let basic = |r: Result<RegistryAuth, AuthError>| match r {
            Ok(RegistryAuth::Basic(u, p)) => Ok((u, p)),
            Ok(RegistryAuth::Anonymous | RegistryAuth::Bearer(_)) => Err("not basic".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        let pair = |u: &str, p: &str| Ok((u.to_owned(), p.to_owned()));
        assert_eq!(
            basic(docker_auth(config, "127.0.0.1:5000")),
            pair("alice", "s3cret")
        );
        assert_eq!(basic(docker_auth(config, "reg.example")), pair("bob", "pw"));
        assert_eq!(
            basic(docker_auth(config, "other:5000")),
            Err("no credentials for other:5000".into())
        );
    }
}
