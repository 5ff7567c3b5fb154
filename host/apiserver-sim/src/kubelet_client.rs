//! How the double reaches kubelets: its own CA, a client certificate it signs (CN
//! `kube-apiserver-kubelet-client`, O `system:masters`) and the TLS client presenting
//! it; and the order in which it tries a node's addresses.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::ca::CaError;

/// The address types the double tries, in order (the API server's default).
pub const DEFAULT_ADDRESS_TYPES: [&str; 5] = [
    "Hostname",
    "InternalDNS",
    "InternalIP",
    "ExternalDNS",
    "ExternalIP",
];

/// How the double reaches kubelets.
pub(crate) struct KubeletClient {
    /// The CA that signed the client certificate (PEM), for kubelets' `clientCAFile`.
    pub ca_pem: String,
    pub(crate) tls: Arc<rustls::ClientConfig>,
}

/// Accepts any kubelet serving certificate (no `--kubelet-certificate-authority`).
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl KubeletClient {
    /// A CA, a client certificate it signs, and a TLS client presenting it; kubelets'
    /// serving certificates verified against `kubelet_ca` when given.
    pub fn new(kubelet_ca: Option<&[CertificateDer<'static>]>) -> Result<Self, CaError> {
        let e = |x: rcgen::Error| CaError::new(x);
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "wasmlet-apiserver-sim-ca");
        let ca_key = rcgen::KeyPair::generate().map_err(e)?;
        let ca_cert = ca_params.self_signed(&ca_key).map_err(e)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let mut client_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        client_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        client_params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:masters");
        client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = rcgen::KeyPair::generate().map_err(e)?;
        let client_cert = client_params.signed_by(&client_key, &issuer).map_err(e)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(CaError::new)?;
        let builder = match kubelet_ca {
            Some(certs) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in certs {
                    roots.add(c.clone()).map_err(CaError::new)?;
                }
                builder.with_root_certificates(roots)
            }
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServer(provider))),
        };
        let key = PrivateKeyDer::try_from(client_key.serialize_der()).map_err(CaError::new)?;
        let mut tls = builder
            .with_client_auth_cert(vec![client_cert.der().clone()], key)
            .map_err(CaError::new)?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(KubeletClient {
            ca_pem: ca_cert.pem(),
            tls: Arc::new(tls),
        })
    }
}
