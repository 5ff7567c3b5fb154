//! One certificate through the CertificateSigningRequest API (`certificates.k8s.io/v1`),
//! as the kubelet asks for its own: an ECDSA P-256 key made here, a CSR posted with the
//! signer and usages the kind of certificate needs, then a watch until the CSR is
//! issued — or denied, or failed, which is an error carrying the API's reason.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

use super::CertError;

/// The signer of kubelets' client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelets' serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// What to ask for.
#[derive(Debug, Clone)]
pub struct Request {
    /// The node: the subject is `O=system:nodes, CN=system:node:<node>`.
    pub node: String,
    /// `signerName`.
    pub signer: &'static str,
    /// `usages`.
    pub usages: &'static [&'static str],
    /// DNS names (serving certificates).
    pub dns_names: Vec<String>,
    /// IP addresses (serving certificates).
    pub ips: Vec<std::net::IpAddr>,
}

impl Request {
    /// The node's client certificate.
    pub fn client(node: &str) -> Self {
        Request {
            node: node.to_owned(),
            signer: CLIENT_SIGNER,
            usages: &["digital signature", "client auth"],
            dns_names: Vec::new(),
            ips: Vec::new(),
        }
    }

    /// The node's serving certificate for its names and addresses.
    pub fn serving(node: &str, dns_names: Vec<String>, ips: Vec<std::net::IpAddr>) -> Self {
        Request {
            node: node.to_owned(),
            signer: SERVING_SIGNER,
            usages: &["digital signature", "key encipherment", "server auth"],
            dns_names,
            ips,
        }
    }

    /// A new key and the PEM certificate request it signs.
    pub fn make(&self) -> Result<(KeyPair, String), CertError> {
        let bad = |e: rcgen::Error| CertError::Invalid(format!("certificate request: {e}"));
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(bad)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "system:nodes");
        dn.push(DnType::CommonName, format!("system:node:{}", self.node));
        params.distinguished_name = dn;
        for name in &self.dns_names {
            let name = name.clone().try_into().map_err(bad)?;
            params.subject_alt_names.push(SanType::DnsName(name));
        }
        params
            .subject_alt_names
            .extend(self.ips.iter().map(|ip| SanType::IpAddress(*ip)));
        let csr = params.serialize_request(&key).map_err(bad)?;
        Ok((key, csr.pem().map_err(bad)?))
    }
}

/// Posts a CSR for `request` with `client`'s credentials and waits until it is issued
/// (at most `wait`); returns the certificate chain and the key, PEM.
pub async fn obtain(
    client: &kube::Client,
    request: &Request,
    wait: Duration,
) -> Result<(String, String), CertError> {
    let (key, pem) = request.make()?;
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            generate_name: Some("csr-".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: request.signer.into(),
            usages: Some(request.usages.iter().map(|u| (*u).to_owned()).collect()),
            ..Default::default()
        },
        status: None,
    };
    let created = api
        .create(&PostParams::default(), &csr)
        .await
        .map_err(|e| CertError::Api(format!("creating a {} CSR: {e}", request.signer)))?;
    let name = created.metadata.name.clone().unwrap_or_default();
    tracing::info!(csr = %name, signer = request.signer, "certificate signing request posted; waiting for it to be issued");
    let cert = tokio::time::timeout(wait, issued(&api, &name, created))
        .await
        .map_err(|_| CertError::Timeout {
            csr: name.clone(),
            after: wait,
        })??;
    Ok((cert, key.serialize_pem()))
}

/// The certificate of CSR `name` once issued: the object as created first, then a watch
/// of it (again from the last version seen when the watch ends).
async fn issued(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    mut last: CertificateSigningRequest,
) -> Result<String, CertError> {
    loop {
        if let Some(done) = outcome(name, &last) {
            return done;
        }
        let version = last.metadata.resource_version.clone().unwrap_or_default();
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        let mut stream = api
            .watch(&params, &version)
            .await
            .map_err(|e| CertError::Api(format!("watching CSR {name}: {e}")))?
            .boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                    if let Some(done) = outcome(name, &o) {
                        return done;
                    }
                    last = o;
                }
                Ok(WatchEvent::Deleted(_)) => {
                    return Err(CertError::Refused {
                        csr: name.into(),
                        reason: "Deleted".into(),
                        message: "the CSR was deleted before it was issued".into(),
                    });
                }
                Ok(WatchEvent::Error(e)) if e.code == 410 => {
                    last = api
                        .get(name)
                        .await
                        .map_err(|e| CertError::Api(format!("reading CSR {name}: {e}")))?;
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(csr = name, "CSR watch ended: {e}");
                    break;
                }
            }
        }
    }
}

/// Issued (the certificate), refused (Denied or Failed, with the API's reason), or
/// `None`: still pending.
fn outcome(name: &str, csr: &CertificateSigningRequest) -> Option<Result<String, CertError>> {
    let status = csr.status.as_ref()?;
    for c in status.conditions.iter().flatten() {
        if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
            return Some(Err(CertError::Refused {
                csr: name.into(),
                reason: format!("{}: {}", c.type_, c.reason.clone().unwrap_or_default()),
                message: c.message.clone().unwrap_or_default(),
            }));
        }
    }
    let cert = status.certificate.as_ref().filter(|c| !c.0.is_empty())?;
    Some(
        String::from_utf8(cert.0.clone())
            .map_err(|_| CertError::Invalid(format!("CSR {name}: the certificate is not PEM"))),
    )
}
