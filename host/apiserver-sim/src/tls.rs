//! The double over HTTPS, as a cluster's API server is reached: a cluster CA made at
//! first use, a serving certificate it signs for 127.0.0.1 and `localhost`, and who is
//! asking — a client certificate signed by the CA (CN the user, each O a group), a
//! bootstrap token (a `bootstrap.kubernetes.io/token` Secret in `kube-system`, as
//! kubeadm makes them), or a token a test registered ([`crate::sim::ApiServerSim::add_token`]).
//!
//! One difference from the real server: a client certificate that does not verify
//! (expired, another CA) fails the TLS handshake here, where the real server answers
//! 401.

use std::time::Duration;

use base64::Engine;
use rustls::pki_types::CertificateDer;
use serde_json::Value;

use crate::ca::CaError;
use crate::store::Store;

impl crate::sim::ApiServerSim {
    /// The cluster CA (PEM): what kubeconfigs trust and what signs CSRs.
    pub fn cluster_ca_pem(&self) -> Result<String, CaError> {
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
    ) -> Result<(String, String), CaError> {
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
