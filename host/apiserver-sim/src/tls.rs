//! The double over HTTPS, as a cluster's API server is reached: a cluster CA made at
//! first use, a serving certificate it signs for 127.0.0.1 and `localhost`, and who is
//! asking — a client certificate signed by the CA (CN the user, each O a group), a
//! bootstrap token (a `bootstrap.kubernetes.io/token` Secret in `kube-system`, as
//! kubeadm makes them), or a token a test registered ([`crate::sim::ApiServerSim::add_token`]).
//!
//! One difference from the real server: a client certificate that does not verify
//! (expired, another CA) fails the TLS handshake here, where the real server answers
//! 401.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

use crate::store::Store;

/// A year: how long the certificates the cluster CA signs are valid, unless set.
pub(crate) const YEAR: Duration = Duration::from_secs(365 * 86_400);

impl crate::sim::ApiServerSim {
    /// Serves over HTTPS on `addr` (port 0: any free port): the cluster CA's serving
    /// certificate, client certificates verified against it.
    pub async fn serve_tls(
        &self,
        addr: std::net::SocketAddr,
    ) -> std::io::Result<crate::sim::Served> {
        let config = self
            .cluster_ca()
            .and_then(ClusterCa::server_config)
            .map_err(std::io::Error::other)?;
        self.serve_on(addr, Some(tokio_rustls::TlsAcceptor::from(config)))
            .await
    }

    pub(crate) fn cluster_ca(&self) -> Result<&ClusterCa, String> {
        self.cluster_ca
            .get_or_init(ClusterCa::new)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The cluster CA (PEM): what kubeconfigs trust and what signs CSRs.
    pub fn cluster_ca_pem(&self) -> Result<String, String> {
        self.cluster_ca().map(|ca| ca.pem.clone())
    }

    /// A client certificate and key (PEM) the cluster CA signs for `user` in `groups`,
    /// valid from `not_before` to `not_after` (in the past, for an expired one).
    pub fn issue_client_certificate(
        &self,
        user: &str,
        groups: &[&str],
        not_before: std::time::SystemTime,
        not_after: std::time::SystemTime,
    ) -> Result<(String, String), String> {
        let at = |t: std::time::SystemTime| time::OffsetDateTime::from(t);
        self.cluster_ca()?
            .issue(&[], user, groups, (at(not_before), at(not_after)), false)
    }

    /// `kubectl create clusterrolebinding NAME --clusterrole ROLE --group GROUP`: what
    /// the controller manager's approver checks a CSR's requester against.
    pub fn bind_group(&self, name: &str, role: &str, group: &str) -> Result<Value, Value> {
        self.create(
            "apis/rbac.authorization.k8s.io/v1",
            "clusterrolebindings",
            group_binding(name, role, group),
        )
    }

    /// A bootstrap token Secret in `kube-system`, as `kubeadm token create` makes it:
    /// `<id>.<secret>` authenticates as `system:bootstrap:<id>` in `system:bootstrappers`
    /// and `extra_groups`.
    pub fn add_bootstrap_token(&self, id: &str, secret: &str, extra_groups: &[&str]) {
        let _ = self.create(
            "api/v1",
            "secrets",
            serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
                "type": "bootstrap.kubernetes.io/token",
                "stringData": {
                    "token-id": id, "token-secret": secret,
                    "usage-bootstrap-authentication": "true",
                    "usage-bootstrap-signing": "true",
                    "auth-extra-groups": extra_groups.join(","),
                },
            }),
        );
    }
}

/// Writes a kubeconfig at `path` for the double at `url` (HTTPS), trusting `ca_pem`,
/// authenticating with bearer `token`: what kubeadm leaves as bootstrap-kubelet.conf.
pub fn write_bootstrap_kubeconfig(
    path: &std::path::Path,
    url: &str,
    ca_pem: &str,
    token: &str,
) -> std::io::Result<()> {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: {url}\n    \
             certificate-authority-data: {ca}\ncontexts:\n- name: tls-bootstrap-token-user@kubernetes\n  \
             context:\n    cluster: kubernetes\n    user: tls-bootstrap-token-user\n\
             current-context: tls-bootstrap-token-user@kubernetes\nusers:\n- name: tls-bootstrap-token-user\n  \
             user:\n    token: {token}\n"
        ),
    )
}

/// Who made `request`: its connection's client certificate, else its bearer token (a
/// bootstrap token or one a test registered); `None`: anonymous.
pub(crate) fn identity(
    sim: &crate::sim::ApiServerSim,
    request: &axum::extract::Request,
) -> Option<Identity> {
    if let Some(PeerIdentity(Some((who, _)))) = request.extensions().get::<PeerIdentity>() {
        return Some(who.clone());
    }
    let token = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?
        .trim()
        .to_owned();
    if let Some(who) = bootstrap_token(&sim.lock(), &token) {
        return Some(who);
    }
    let (user, mut groups) = sim.token_user(&token)?;
    groups.push("system:authenticated".into());
    Some(Identity { user, groups })
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user name.
    pub user: String,
    /// Its groups (`system:authenticated` included).
    pub groups: Vec<String>,
}

/// The identity of a TLS connection's client certificate, when it presented one, and
/// when the certificate expires (each request is authenticated: once it has expired,
/// requests on the connection get 401, as the API server answers them).
#[derive(Debug, Clone)]
pub(crate) struct PeerIdentity(pub Option<(Identity, std::time::SystemTime)>);

/// The cluster's certificate authority.
pub(crate) struct ClusterCa {
    pub issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub pem: String,
    der: CertificateDer<'static>,
}

impl ClusterCa {
    pub(crate) fn new() -> Result<Self, String> {
        let e = |x: rcgen::Error| x.to_string();
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
    ) -> Result<(String, String), String> {
        let e = |x: rcgen::Error| x.to_string();
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
    pub(crate) fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, String> {
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
        roots.add(self.der.clone()).map_err(|x| x.to_string())?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|x| x.to_string())?;
        use rustls::pki_types::pem::PemObject;
        let certs =
            vec![CertificateDer::from_pem_slice(cert.as_bytes()).map_err(|x| x.to_string())?];
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|x| x.to_string())?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|x| x.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .map_err(|x| x.to_string())?;
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

/// The identity a verified client certificate names, and when it expires.
pub(crate) fn certificate_identity(
    cert: &CertificateDer<'_>,
) -> Option<(Identity, std::time::SystemTime)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let expires = std::time::UNIX_EPOCH
        + Duration::from_secs(u64::try_from(parsed.validity().not_after.timestamp()).unwrap_or(0));
    let subject = parsed.subject();
    let user = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    let mut groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    groups.push("system:authenticated".into());
    Some((Identity { user, groups }, expires))
}

/// Whether `request` came over a connection whose client certificate has expired since
/// (the real server authenticates every request: 401).
pub(crate) fn expired(request: &axum::extract::Request) -> bool {
    matches!(
        request.extensions().get::<PeerIdentity>(),
        Some(PeerIdentity(Some((_, expires)))) if *expires <= std::time::SystemTime::now()
    )
}

/// The identity of a bootstrap token (`<id>.<secret>`): its Secret in `kube-system`,
/// usable for authentication and not expired.
pub(crate) fn bootstrap_token(store: &Store, token: &str) -> Option<Identity> {
    let (id, secret) = token.split_once('.')?;
    let key = (
        "api/v1".to_owned(),
        "secrets".to_owned(),
        "kube-system".to_owned(),
        format!("bootstrap-token-{id}"),
    );
    let object = store.objects.get(&key)?;
    if object["type"] != "bootstrap.kubernetes.io/token" {
        return None;
    }
    let field = |name: &str| -> Option<String> {
        if let Some(s) = object["stringData"][name].as_str() {
            return Some(s.to_owned());
        }
        let b = object["data"][name].as_str()?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b).ok()?;
        String::from_utf8(bytes).ok()
    };
    if field("token-id")? != id
        || field("token-secret")? != secret
        || field("usage-bootstrap-authentication").as_deref() != Some("true")
    {
        return None;
    }
    if let Some(expires) = field("expiration")
        && expires.as_str() < crate::store::now_rfc3339().as_str()
    {
        return None;
    }
    let mut groups = vec!["system:bootstrappers".to_owned()];
    groups.extend(
        field("auth-extra-groups")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_owned),
    );
    groups.push("system:authenticated".into());
    Some(Identity {
        user: format!("system:bootstrap:{id}"),
        groups,
    })
}

/// A ClusterRoleBinding `name` of the ClusterRole `role` to the group `group`.
pub(crate) fn group_binding(name: &str, role: &str, group: &str) -> Value {
    serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    })
}

/// Whether `identity` is bound (a ClusterRoleBinding naming its user or one of its
/// groups) to the ClusterRole `role`.
pub(crate) fn bound(store: &Store, identity: &Identity, role: &str) -> bool {
    store
        .objects
        .iter()
        .filter(|((p, r, _, _), _)| {
            p == "apis/rbac.authorization.k8s.io/v1" && r == "clusterrolebindings"
        })
        .map(|(_, b)| b)
        .filter(|b| b["roleRef"]["kind"] == "ClusterRole" && b["roleRef"]["name"] == role)
        .flat_map(|b| b["subjects"].as_array().cloned().unwrap_or_default())
        .any(|s: Value| {
            let name = s["name"].as_str().unwrap_or_default();
            match s["kind"].as_str() {
                Some("User") => name == identity.user,
                Some("Group") => identity.groups.iter().any(|g| g == name),
                _ => false,
            }
        })
}
