//! The serving certificate and the TLS settings: `tlsCertFile` / `tlsPrivateKeyFile`,
//! or a self-signed certificate generated once under the root directory (as the kubelet
//! does under its `--cert-dir`); `tlsMinVersion`, `tlsCipherSuites`, and client
//! certificates verified against `authentication.x509.clientCAFile`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS setting that cannot be used, naming the configuration field.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or parsed.
    #[error("{field}: {path}: {why}")]
    File {
        /// The configuration field.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A value the TLS stack does not know.
    #[error("{field}: {why}")]
    Value {
        /// The configuration field.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The certificate and key do not make a TLS configuration.
    #[error("serving certificate: {0}")]
    Config(#[source] rustls::Error),
    /// The self-signed certificate could not be made or stored.
    #[error("self-signed serving certificate under {dir}: {why}")]
    SelfSigned {
        /// Where it is kept.
        dir: PathBuf,
        /// Why it failed.
        why: String,
    },
}

/// `tlsMinVersion`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MinVersion {
    /// TLS 1.2 (also what `VersionTLS10` / `VersionTLS11` get: rustls speaks no older).
    #[default]
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

impl MinVersion {
    /// From the kubelet's names (`VersionTLS12`, `VersionTLS13`; `VersionTLS10` and
    /// `VersionTLS11` are raised to 1.2 with a warning).
    pub fn parse(name: &str) -> Result<Self, TlsError> {
        match name {
            "" | "VersionTLS12" => Ok(MinVersion::Tls12),
            "VersionTLS13" => Ok(MinVersion::Tls13),
            "VersionTLS10" | "VersionTLS11" => {
                tracing::warn!(
                    "tlsMinVersion: {name}: TLS below 1.2 is not offered (rustls); the minimum is VersionTLS12"
                );
                Ok(MinVersion::Tls12)
            }
            other => Err(TlsError::Value {
                field: "tlsMinVersion",
                why: format!(
                    "{other:?} is not one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13"
                ),
            }),
        }
    }
}

/// What the server's TLS is made from.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// `tlsCertFile` (PEM, the chain).
    pub cert_file: Option<PathBuf>,
    /// `tlsPrivateKeyFile` (PEM).
    pub key_file: Option<PathBuf>,
    /// `tlsMinVersion`.
    pub min_version: MinVersion,
    /// `tlsCipherSuites`, Go's names; empty: rustls's defaults. As in Go, they choose
    /// among TLS 1.2 suites; TLS 1.3's are always on.
    pub cipher_suites: Vec<String>,
    /// `authentication.x509.clientCAFile`: client certificates signed by it identify
    /// their user (CN) and groups (O).
    pub client_ca_file: Option<PathBuf>,
    /// `serverTLSBootstrap`: the certificate the cluster signed, set when it is issued
    /// and again at each rotation (until then handshakes fail, as the kubelet's do).
    /// The files, when given, win.
    pub from_cluster: Option<ClusterCertificate>,
}

/// The serving certificate the cluster signs, changed while the server runs: each
/// handshake presents the current one.
#[derive(Clone, Default)]
pub struct ClusterCertificate(Arc<std::sync::RwLock<Option<Arc<rustls::sign::CertifiedKey>>>>);

impl std::fmt::Debug for ClusterCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.get().is_some() {
            "ClusterCertificate(issued)"
        } else {
            "ClusterCertificate(pending)"
        })
    }
}

impl ClusterCertificate {
    /// From now on, handshakes present `key`.
    pub fn set(&self, key: rustls::sign::CertifiedKey) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(key));
    }

    /// The current certificate, once issued.
    pub fn get(&self) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl rustls::server::ResolvesServerCert for ClusterCertificate {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.get()
    }
}

/// The names and addresses a self-signed certificate is made for.
#[derive(Debug, Clone, Default)]
pub struct SelfSigned {
    /// Where `wasmlet.crt` and `wasmlet.key` are kept (`<rootDir>/pki`).
    pub dir: PathBuf,
    /// DNS names: the node's name (its Hostname address) and the host's name.
    pub names: Vec<String>,
    /// The node's IPs.
    pub ips: Vec<IpAddr>,
}

/// The rustls cipher suite for one of Go's TLS 1.2 names.
fn suite(name: &str, provider: &CryptoProvider) -> Result<SupportedCipherSuite, TlsError> {
    use rustls::CipherSuite as C;
    let wanted = match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
            C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
            C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        // TLS 1.3 suites are always on (Go ignores them here too).
        "TLS_AES_128_GCM_SHA256" => C::TLS13_AES_128_GCM_SHA256,
        "TLS_AES_256_GCM_SHA384" => C::TLS13_AES_256_GCM_SHA384,
        "TLS_CHACHA20_POLY1305_SHA256" => C::TLS13_CHACHA20_POLY1305_SHA256,
        other if other.starts_with("TLS_") => {
            return Err(TlsError::Value {
                field: "tlsCipherSuites",
                why: format!(
                    "{other} is not offered: only ECDHE suites with AES-GCM or ChaCha20-Poly1305 are (CBC, RC4, 3DES and static RSA key exchange are not)"
                ),
            });
        }
        other => {
            return Err(TlsError::Value {
                field: "tlsCipherSuites",
                why: format!("{other:?} is not a cipher suite name"),
            });
        }
    };
    provider
        .cipher_suites
        .iter()
        .find(|s| s.suite() == wanted)
        .copied()
        .ok_or_else(|| TlsError::Value {
            field: "tlsCipherSuites",
            why: format!("{name} is not available"),
        })
}

/// The crypto provider: ring's suites, narrowed to `tlsCipherSuites`.
fn provider(settings: &TlsSettings) -> Result<CryptoProvider, TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !settings.cipher_suites.is_empty() {
        let mut chosen: Vec<SupportedCipherSuite> = provider
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_some())
            .copied()
            .collect();
        for name in &settings.cipher_suites {
            let s = suite(name, &provider)?;
            if !chosen.contains(&s) {
                chosen.push(s);
            }
        }
        provider.cipher_suites = chosen;
    }
    Ok(provider)
}

/// Checks `tlsCipherSuites` (each a suite this server offers), as a configuration
/// file is read.
pub fn check_cipher_suites(names: &[String]) -> Result<(), TlsError> {
    provider(&TlsSettings {
        cipher_suites: names.to_vec(),
        ..TlsSettings::default()
    })
    .map(drop)
}

fn read_certs(field: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let at = |why: String| TlsError::File {
        field,
        path: path.to_owned(),
        why,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| at(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| at(e.to_string()))?;
    if certs.is_empty() {
        return Err(at("no PEM certificate in it".into()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        field: "tlsPrivateKeyFile",
        path: path.to_owned(),
        why: e.to_string(),
    })
}

/// The self-signed certificate under `s.dir`, made on first use, and made again when the
/// stored one does not name every name and address (the node was renamed).
pub fn self_signed(
    s: &SelfSigned,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let err = |why: String| TlsError::SelfSigned {
        dir: s.dir.clone(),
        why,
    };
    let cert_path = s.dir.join("wasmlet.crt");
    let key_path = s.dir.join("wasmlet.key");
    if let (Ok(certs), Ok(key)) = (read_certs("tlsCertFile", &cert_path), read_key(&key_path))
        && names_everything(&certs[0], s)
    {
        return Ok((certs, key));
    }
    let mut params =
        rcgen::CertificateParams::new(s.names.clone()).map_err(|e| err(e.to_string()))?;
    params
        .subject_alt_names
        .extend(s.ips.iter().map(|ip| rcgen::SanType::IpAddress(*ip)));
    let cn = format!(
        "{}@{}",
        s.names.first().map_or("wasmlet", String::as_str),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    // A year, as the kubelet's self-signed certificate.
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    let now = time_now_year();
    params.not_after = rcgen::date_time_ymd(now + 1, 12, 31);
    let key = rcgen::KeyPair::generate().map_err(|e| err(e.to_string()))?;
    let cert = params.self_signed(&key).map_err(|e| err(e.to_string()))?;
    std::fs::create_dir_all(&s.dir).map_err(|e| err(e.to_string()))?;
    write_private(&key_path, key.serialize_pem().as_bytes()).map_err(|e| err(e.to_string()))?;
    std::fs::write(&cert_path, cert.pem()).map_err(|e| err(e.to_string()))?;
    tracing::info!(
        cert = %cert_path.display(),
        names = ?s.names,
        ips = ?s.ips,
        "kubelet server: generated a self-signed serving certificate"
    );
    Ok((
        vec![cert.der().clone()],
        PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| err(e.to_string()))?,
    ))
}

/// The current year (for the certificate's validity).
fn time_now_year() -> i32 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Close enough for a validity bound: 365.2425-day years.
    1970 + i32::try_from(secs / 31_556_952).unwrap_or(0)
}

fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)
}

/// Whether `cert` names every DNS name and IP of `s`.
fn names_everything(cert: &CertificateDer<'_>, s: &SelfSigned) -> bool {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return false;
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return false;
    };
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    for name in &san.value.general_names {
        match name {
            x509_parser::extensions::GeneralName::DNSName(d) => dns.push(d.to_string()),
            x509_parser::extensions::GeneralName::IPAddress(b) => match b.len() {
                4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(*b).unwrap_or_default())),
                16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(*b).unwrap_or_default())),
                _ => {}
            },
            _ => {}
        }
    }
    let valid = parsed.validity().is_valid();
    valid && s.names.iter().all(|n| dns.contains(n)) && s.ips.iter().all(|i| ips.contains(i))
}

/// Where the serving certificate comes from.
enum Serving {
    /// `tlsCertFile` / `tlsPrivateKeyFile`, or self-signed.
    Files(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>),
    /// Signed by the cluster (`serverTLSBootstrap`).
    Cluster(ClusterCertificate),
}

/// The rustls server configuration: the serving certificate (from the files, or
/// self-signed), the minimum version, the cipher suites, and client certificates
/// verified against the client CA when one is set (requests without one are still
/// accepted: they may carry a token).
pub fn server_config(
    settings: &TlsSettings,
    fallback: &SelfSigned,
) -> Result<Arc<ServerConfig>, TlsError> {
    let serving = match (&settings.cert_file, &settings.key_file) {
        (Some(c), Some(k)) => Serving::Files(read_certs("tlsCertFile", c)?, read_key(k)?),
        (Some(_), None) => {
            return Err(TlsError::Value {
                field: "tlsPrivateKeyFile",
                why: "must be set with tlsCertFile".into(),
            });
        }
        (None, Some(_)) => {
            return Err(TlsError::Value {
                field: "tlsCertFile",
                why: "must be set with tlsPrivateKeyFile".into(),
            });
        }
        (None, None) => match &settings.from_cluster {
            Some(cluster) => Serving::Cluster(cluster.clone()),
            None => {
                let (certs, key) = self_signed(fallback)?;
                Serving::Files(certs, key)
            }
        },
    };
    let provider = Arc::new(provider(settings)?);
    let versions: &[&rustls::SupportedProtocolVersion] = match settings.min_version {
        MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(TlsError::Config)?;
    let builder = match &settings.client_ca_file {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs("authentication.x509.clientCAFile", path)? {
                roots.add(cert).map_err(|e| TlsError::File {
                    field: "authentication.x509.clientCAFile",
                    path: path.clone(),
                    why: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::File {
                    field: "authentication.x509.clientCAFile",
                    path: path.clone(),
                    why: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = match serving {
        Serving::Files(certs, key) => builder
            .with_single_cert(certs, key)
            .map_err(TlsError::Config)?,
        Serving::Cluster(cluster) => builder.with_cert_resolver(Arc::new(cluster)),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The user a verified client certificate names: CN is the user, each O a group.
pub fn certificate_user(cert: &CertificateDer<'_>) -> Option<crate::authn::User> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_owned();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_owned)
        .collect();
    Some(crate::authn::User {
        name,
        groups,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_suites_use_the_kubelets_names() {
        assert_eq!(
            MinVersion::parse("VersionTLS13").ok(),
            Some(MinVersion::Tls13)
        );
        assert_eq!(
            MinVersion::parse("VersionTLS10").ok(),
            Some(MinVersion::Tls12)
        );
        let err = MinVersion::parse("TLS1.3").expect_err("unknown");
        assert!(err.to_string().starts_with("tlsMinVersion"), "{err}");
        let settings = TlsSettings {
            cipher_suites: vec!["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()],
            ..Default::default()
        };
        let p = provider(&settings).expect("known suite");
        assert_eq!(
            p.cipher_suites
                .iter()
                .filter(|s| s.tls13().is_none())
                .count(),
            1
        );
        for bad in ["TLS_RSA_WITH_AES_128_CBC_SHA", "AES"] {
            let settings = TlsSettings {
                cipher_suites: vec![bad.into()],
                ..Default::default()
            };
            let err = provider(&settings).expect_err(bad).to_string();
            assert!(
                err.starts_with("tlsCipherSuites") && err.contains(bad),
                "{err}"
            );
        }
    }

    #[test]
    fn a_self_signed_certificate_is_made_once_for_the_nodes_names() {
        let dir = std::env::temp_dir().join(format!("wasmlet-pki-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let s = SelfSigned {
            dir: dir.clone(),
            names: vec!["node-a".into()],
            ips: vec!["10.0.0.5".parse().expect("ip")],
        };
        let (first, _) = self_signed(&s).expect("made");
        assert!(names_everything(&first[0], &s));
        let (again, _) = self_signed(&s).expect("read");
        assert_eq!(first, again, "kept, not made again");
        let renamed = SelfSigned {
            names: vec!["node-b".into()],
            ..s.clone()
        };
        let (other, _) = self_signed(&renamed).expect("made again");
        assert_ne!(first, other, "a renamed node gets a certificate naming it");
        assert!(server_config(&TlsSettings::default(), &renamed).is_ok());
        let _ = std::fs::remove_dir_all(dir);
    }
}
