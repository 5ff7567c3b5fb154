//! The cluster's certificate authority: made at a double's first use, it signs the
//! serving certificate, client certificates and what CSRs ask for.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate or TLS configuration the double could not make (rcgen's or rustls'
/// error, kept as the source; shared, as the double keeps its CA for every caller).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct CaError(#[source] Arc<dyn std::error::Error + Send + Sync>);

impl CaError {
    pub(crate) fn new(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(Arc::from(e.into()))
    }
}

/// A year: how long the certificates the cluster CA signs are valid, unless set.
pub(crate) const YEAR: Duration = Duration::from_secs(365 * 86_400);

/// The cluster's certificate authority.
pub(crate) struct ClusterCa {
    pub issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub pem: String,
    der: CertificateDer<'static>,
}

impl ClusterCa {
    pub(crate) fn new() -> Result<Self, CaError> {
        let e = |x: rcgen::Error| CaError::new(x);
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubernetes");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let key = rcgen::KeyPair::generate().map_err(e)?;
        let cert = params.self_signed(&key).map_err(e)?;
        Ok(ClusterCa {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    /// A certificate (PEM) and key (PEM) it signs: `names` as SANs, `cn` / `groups` as
    /// the subject, valid from now for `valid`.
    pub(crate) fn issue(
        &self,
        names: &[&str],
        cn: &str,
        groups: &[&str],
        (not_before, not_after): (time::OffsetDateTime, time::OffsetDateTime),
        server: bool,
    ) -> Result<(String, String), CaError> {
        let e = |x: rcgen::Error| CaError::new(x);
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = rcgen::CertificateParams::new(names).map_err(e)?;
        params.distinguished_name = subject(cn, groups);
        params.not_before = not_before;
        params.not_after = not_after;
        params.extended_key_usages = vec![if server {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        }];
        let key = rcgen::KeyPair::generate().map_err(e)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(e)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The server's TLS: a certificate for 127.0.0.1 and `localhost`; client
    /// certificates the CA signed are verified when presented, requests without one
    /// accepted (they may carry a token).
    pub(crate) fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, CaError> {
        let now = time::OffsetDateTime::now_utc();
        let (cert, key) = self.issue(
            &["127.0.0.1", "localhost"],
            "kube-apiserver",
            &[],
            (now - time::Duration::minutes(5), now + YEAR),
            true,
        )?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.der.clone()).map_err(CaError::new)?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(CaError::new)?;
        use rustls::pki_types::pem::PemObject;
        let certs = vec![CertificateDer::from_pem_slice(cert.as_bytes()).map_err(CaError::new)?];
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(CaError::new)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(CaError::new)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .map_err(CaError::new)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A certificate's subject for user `cn` in `groups` (each an O).
pub(crate) fn subject(cn: &str, groups: &[&str]) -> rcgen::DistinguishedName {
    let mut dn = rcgen::DistinguishedName::new();
    for g in groups {
        dn.push(rcgen::DnType::OrganizationName, *g);
    }
    dn.push(rcgen::DnType::CommonName, cn);
    dn
}
