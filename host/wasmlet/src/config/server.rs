//! The kubelet server's part of the configuration: `enableServer`, `address`, `port`,
//! `tlsCertFile`, `tlsPrivateKeyFile`, `tlsMinVersion`, `tlsCipherSuites`,
//! `authentication` and `authorization`, with the secure defaults of a
//! KubeletConfiguration file (anonymous off, Webhook authorization).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;
use wasmlet_plugin_host::convert::parse_duration;
use wasmlet_server::authn::AuthnSettings;
use wasmlet_server::authz::{AuthzSettings, Mode};
use wasmlet_server::tls::{MinVersion, TlsSettings};

/// `authentication` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct AuthnFile {
    x509: Option<X509File>,
    webhook: Option<AuthnWebhookFile>,
    anonymous: Option<Enabled>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct X509File {
    #[serde(rename = "clientCAFile")]
    client_ca_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthnWebhookFile {
    enabled: Option<bool>,
    #[serde(rename = "cacheTTL")]
    cache_ttl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Enabled {
    enabled: Option<bool>,
}

/// `authorization` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct AuthzFile {
    mode: Option<String>,
    webhook: Option<AuthzWebhookFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthzWebhookFile {
    #[serde(rename = "cacheAuthorizedTTL")]
    cache_authorized_ttl: Option<String>,
    #[serde(rename = "cacheUnauthorizedTTL")]
    cache_unauthorized_ttl: Option<String>,
}

/// The server's fields as written.
#[derive(Debug, Default)]
pub(super) struct ServerFields {
    pub enable_server: Option<bool>,
    pub address: Option<IpAddr>,
    pub port: Option<i64>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    pub tls_min_version: Option<String>,
    pub tls_cipher_suites: Option<Vec<String>>,
    pub authentication: Option<AuthnFile>,
    pub authorization: Option<AuthzFile>,
}

/// The kubelet server, validated.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `address`:`port` (port 0: any free port, reported as the node's kubelet port).
    pub addr: SocketAddr,
    /// TLS.
    pub tls: TlsSettings,
    /// `authentication`.
    pub authn: AuthnSettings,
    /// `authorization`.
    pub authz: AuthzSettings,
}

impl ServerConfig {
    /// What `wasmlet up` serves: loopback only, anonymous requests allowed and every
    /// request authorized (the kubelet's own defaults without a configuration file,
    /// kept off the network).
    pub fn embedded() -> Self {
        ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 10250)),
            tls: TlsSettings::default(),
            authn: AuthnSettings {
                anonymous: true,
                ..AuthnSettings::default()
            },
            authz: AuthzSettings {
                mode: Mode::AlwaysAllow,
                ..AuthzSettings::default()
            },
        }
    }
}

fn ttl(field: &str, text: Option<&str>, default: Duration) -> Result<Duration> {
    match text {
        None => Ok(default),
        Some(t) => parse_duration(t).map_err(|e| anyhow::anyhow!("{field}: {e}")),
    }
}

fn absolute(field: &str, p: Option<PathBuf>) -> Result<Option<PathBuf>> {
    match p {
        Some(p) if !p.is_absolute() => bail!("{field}: {} must be an absolute path", p.display()),
        other => Ok(other),
    }
}

/// The server, or `None` with `enableServer: false`.
pub(super) fn server(f: ServerFields) -> Result<Option<ServerConfig>> {
    if f.enable_server == Some(false) {
        return Ok(None);
    }
    let port = match f.port {
        None => 10250,
        Some(p) => {
            u16::try_from(p).map_err(|_| anyhow::anyhow!("port: {p} is not a port (0 to 65535)"))?
        }
    };
    let addr = SocketAddr::new(f.address.unwrap_or(IpAddr::from([0, 0, 0, 0])), port);
    let authn_file = f.authentication.unwrap_or_default();
    let webhook = authn_file.webhook.unwrap_or_default();
    let defaults = AuthnSettings::default();
    let authn = AuthnSettings {
        anonymous: authn_file
            .anonymous
            .and_then(|a| a.enabled)
            .unwrap_or(false),
        webhook: webhook.enabled.unwrap_or(defaults.webhook),
        cache_ttl: ttl(
            "authentication.webhook.cacheTTL",
            webhook.cache_ttl.as_deref(),
            defaults.cache_ttl,
        )?,
        x509: false,
    };
    let client_ca_file = absolute(
        "authentication.x509.clientCAFile",
        authn_file.x509.and_then(|x| x.client_ca_file),
    )?;
    let authz_file = f.authorization.unwrap_or_default();
    let mode = match authz_file.mode.as_deref() {
        None | Some("Webhook") => Mode::Webhook,
        Some("AlwaysAllow") => Mode::AlwaysAllow,
        Some(other) => bail!("authorization.mode: {other:?} must be Webhook or AlwaysAllow"),
    };
    let zwebhook = authz_file.webhook.unwrap_or_default();
    let zdefaults = AuthzSettings::default();
    let authz = AuthzSettings {
        mode,
        authorized_ttl: ttl(
            "authorization.webhook.cacheAuthorizedTTL",
            zwebhook.cache_authorized_ttl.as_deref(),
            zdefaults.authorized_ttl,
        )?,
        unauthorized_ttl: ttl(
            "authorization.webhook.cacheUnauthorizedTTL",
            zwebhook.cache_unauthorized_ttl.as_deref(),
            zdefaults.unauthorized_ttl,
        )?,
    };
    let tls = TlsSettings {
        cert_file: absolute("tlsCertFile", f.tls_cert_file)?,
        key_file: absolute("tlsPrivateKeyFile", f.tls_private_key_file)?,
        min_version: MinVersion::parse(f.tls_min_version.as_deref().unwrap_or(""))?,
        cipher_suites: f.tls_cipher_suites.unwrap_or_default(),
        client_ca_file,
    };
    wasmlet_server::tls::check_cipher_suites(&tls.cipher_suites)?;
    if tls.cert_file.is_some() != tls.key_file.is_some() {
        bail!(
            "tlsCertFile and tlsPrivateKeyFile: set both, or neither (a self-signed certificate is made)"
        );
    }
    Ok(Some(ServerConfig {
        addr,
        tls,
        authn,
        authz,
    }))
}
