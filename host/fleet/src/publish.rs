//! Publishing a component as an OCI artifact, in the layout the WebAssembly ecosystem
//! uses (one `application/wasm` layer, config `application/vnd.wasm.config.v0+json`):
//! what `wasmlet plugin push` does, and what nodes pull.

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client as OciClient, Reference};
use serde_json::json;

use crate::fetch::{WASM_CONFIG, WASM_LAYER, sha256_hex};

/// What a push published.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The component's digest (`sha256:…`): what a WasmletPlugin pins.
    pub digest: String,
    /// The manifest's URL in the registry.
    pub manifest_url: String,
}

/// Pushes `component` to `reference` (`REGISTRY/REPO:TAG`, `oci://` allowed), plain HTTP
/// when `insecure`, with `credentials` (user, password; anonymous without). `world`
/// goes into the config when known.
pub async fn push(
    component: &[u8],
    reference: &str,
    insecure: bool,
    credentials: Option<(String, String)>,
    world: Option<&str>,
) -> Result<Pushed, String> {
    let auth = match credentials {
        Some((user, password)) => RegistryAuth::Basic(user, password),
        None => RegistryAuth::Anonymous,
    };
    let text = reference.strip_prefix("oci://").unwrap_or(reference);
    let parsed: Reference = text
        .parse()
        .map_err(|e| format!("{reference}: not an OCI reference: {e}"))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = OciClient::new(ClientConfig {
        protocol: if insecure {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        ..Default::default()
    });
    let digest = format!("sha256:{}", sha256_hex(component));
    let mut config = json!({
        "created": k8s_openapi::jiff::Timestamp::now().to_string(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [digest],
    });
    if let Some(world) = world {
        config["component"] = json!({"target": world});
    }
    let layer = ImageLayer::new(component.to_vec(), WASM_LAYER.to_owned(), None);
    let config = Config::new(
        serde_json::to_vec(&config).map_err(|e| e.to_string())?,
        WASM_CONFIG.to_owned(),
        None,
    );
    let response = client
        .push(&parsed, &[layer], config, &auth, None)
        .await
        .map_err(|e| format!("pushing to {text}: {e}"))?;
    Ok(Pushed {
        digest,
        manifest_url: response.manifest_url,
    })
}
