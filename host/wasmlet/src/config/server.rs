//! The kubelet server's part of the configuration: `enableServer`, `address`, `port`,
//! `tlsCertFile`, `tlsPrivateKeyFile`, `tlsMinVersion`, `tlsCipherSuites`,
//! `authentication` and `authorization`, with the secure defaults of a
//! KubeletConfiguration file (anonymous off, Webhook authorization).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;
use wasmlet_server::authn::AuthnSettings;
use wasmlet_server::authz::{AuthzSettings, Mode};
use wasmlet_server::tls::{MinVersion, TlsSettings};

use super::absolute;
use super::duration::Dur;

/// `authentication` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub(super) struct AuthnFile {
    x509: X509File,
    webhook: AuthnWebhookFile,
    anonymous: Enabled,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct X509File {
    #[serde(rename = "clientCAFile")]
    client_ca_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct AuthnWebhookFile {
    enabled: Option<bool>,
    #[serde(rename = "cacheTTL")]
    cache_ttl: Dur,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Enabled {
    enabled: Option<bool>,
}

impl AuthnFile {
    /// The kubelet's defaults: anonymous off, webhook on, tokens cached 2 minutes; with
    /// no configuration file (`legacy`), anonymous on and webhook off.
    pub(super) fn set_defaults(&mut self, legacy: bool) {
        self.anonymous.enabled.get_or_insert(legacy);
        self.webhook.enabled.get_or_insert(!legacy);
        if self.webhook.cache_ttl.is_zero() {
            self.webhook.cache_ttl = Dur(Duration::from_secs(120));
        }
    }
}

/// `authorization` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub(super) struct AuthzFile {
    mode: String,
    webhook: AuthzWebhookFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct AuthzWebhookFile {
    #[serde(rename = "cacheAuthorizedTTL")]
    cache_authorized_ttl: Dur,
    #[serde(rename = "cacheUnauthorizedTTL")]
    cache_unauthorized_ttl: Dur,
}

impl AuthzFile {
    /// The kubelet's defaults: Webhook, allowed answers cached 5 minutes, refusals 30
    /// seconds; with no configuration file (`legacy`), AlwaysAllow.
    pub(super) fn set_defaults(&mut self, legacy: bool) {
        if self.mode.is_empty() {
            self.mode = if legacy { "AlwaysAllow" } else { "Webhook" }.to_owned();
        }
        let w = &mut self.webhook;
        if w.cache_authorized_ttl.is_zero() {
            w.cache_authorized_ttl = Dur(Duration::from_secs(300));
        }
        if w.cache_unauthorized_ttl.is_zero() {
            w.cache_unauthorized_ttl = Dur(Duration::from_secs(30));
        }
    }
}

/// The server's fields as written, defaults applied.
#[derive(Debug, Default)]
pub(super) struct ServerFields {
    pub enable_server: Option<bool>,
    pub address: Option<IpAddr>,
    pub port: Option<i64>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    pub tls_min_version: String,
    pub tls_cipher_suites: Vec<String>,
    pub authentication: AuthnFile,
    pub authorization: AuthzFile,
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
    let a = f.authentication;
    let authn = AuthnSettings {
        anonymous: a.anonymous.enabled.unwrap_or(false),
        webhook: a.webhook.enabled.unwrap_or(true),
        cache_ttl: a.webhook.cache_ttl.0,
        x509: false,
    };
    let client_ca_file = absolute("authentication.x509.clientCAFile", a.x509.client_ca_file)?;
    let z = f.authorization;
    let mode = match z.mode.as_str() {
        "Webhook" => Mode::Webhook,
        "AlwaysAllow" => Mode::AlwaysAllow,
        other => bail!("authorization.mode: {other:?} must be Webhook or AlwaysAllow"),
    };
    let authz = AuthzSettings {
        mode,
        authorized_ttl: z.webhook.cache_authorized_ttl.0,
        unauthorized_ttl: z.webhook.cache_unauthorized_ttl.0,
    };
    let tls = TlsSettings {
        cert_file: absolute("tlsCertFile", f.tls_cert_file)?,
        key_file: absolute("tlsPrivateKeyFile", f.tls_private_key_file)?,
        min_version: MinVersion::parse(&f.tls_min_version)?,
        cipher_suites: f.tls_cipher_suites,
        client_ca_file,
        from_cluster: None,
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

/// What the agent listens on: healthz, the read-only port and the kubelet server.
pub(super) struct Listeners {
    pub healthz: (IpAddr, u16),
    pub read_only: (IpAddr, u16),
    pub server: Option<ServerConfig>,
}

fn port(field: &str, value: Option<i64>, default: u16) -> Result<u16> {
    match value {
        None => Ok(default),
        Some(v) => {
            u16::try_from(v).map_err(|_| anyhow::anyhow!("{field}: {v} is not a port (0 to 65535)"))
        }
    }
}

fn address(field: &str, value: &str) -> Result<IpAddr> {
    value
        .parse()
        .map_err(|_| anyhow::anyhow!("{field}: {value:?} is not an IP address"))
}

/// The listeners' fields, checked: `healthzBindAddress`:`healthzPort`,
/// `address`:`readOnlyPort` (loopback unless `address` is given: it has no
/// authentication), and the server.
pub(super) fn listeners(f: &mut super::file::File) -> Result<Listeners> {
    let kubelet_address = Some(f.address.as_str())
        .filter(|a| !a.is_empty())
        .map(|a| address("address", a))
        .transpose()?;
    let healthz = (
        address("healthzBindAddress", &f.healthz_bind_address)?,
        port("healthzPort", f.healthz_port, 10248)?,
    );
    let read_only = (
        kubelet_address.unwrap_or(IpAddr::from([127, 0, 0, 1])),
        port("readOnlyPort", f.read_only_port, 10255)?,
    );
    let server = server(ServerFields {
        enable_server: f.enable_server,
        address: kubelet_address,
        port: f.port,
        tls_cert_file: f.tls_cert_file.take(),
        tls_private_key_file: f.tls_private_key_file.take(),
        tls_min_version: std::mem::take(&mut f.tls_min_version),
        tls_cipher_suites: std::mem::take(&mut f.tls_cipher_suites),
        authentication: std::mem::take(&mut f.authentication),
        authorization: std::mem::take(&mut f.authorization),
    })?;
    Ok(Listeners {
        healthz,
        read_only,
        server,
    })
}
