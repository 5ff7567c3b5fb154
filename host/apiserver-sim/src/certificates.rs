//! CertificateSigningRequests (`certificates.k8s.io/v1`) as the API server and the
//! controller manager handle a kubelet's:
//!
//! - create: the request must be a PEM `CERTIFICATE REQUEST`, `signerName` and `usages`
//!   given (else 422 `Invalid`); `spec.username` / `spec.groups` are who asked; a
//!   `kubernetes.io/kube-apiserver-client` request for `system:masters` is refused (403,
//!   the CertificateSubjectRestriction admission plugin).
//! - the approver (kube-controller-manager's `csrapproving`): a node client certificate
//!   request (`kubernetes.io/kube-apiserver-client-kubelet`, `O=system:nodes`,
//!   `CN=system:node:<name>`, no SANs, usages `digital signature` and `client auth`) is
//!   approved when the requester is bound to the `…:selfnodeclient` ClusterRole and asks
//!   for its own name, or to `…:nodeclient`. Nothing else is approved automatically.
//! - the `approval` subresource (`kubectl certificate approve` / `deny`) sets the
//!   conditions.
//! - the signer (`csrsigning`): an approved request of a kubelet signer that meets the
//!   signer's rules gets a certificate from the cluster CA, valid from 5 minutes ago
//!   (the signer's backdating) for the signing duration (`--cluster-signing-duration`,
//!   or `spec.expirationSeconds` when shorter); one that does not gets a `Failed`
//!   condition (`SignerValidationFailure`).

use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::ca::ClusterCa;
use crate::store::{Store, now_rfc3339, status};
use crate::tls::{Identity, bound};

/// Where CSRs live.
pub(crate) const PREFIX: &str = "apis/certificates.k8s.io/v1";
/// Their resource.
pub(crate) const RESOURCE: &str = "certificatesigningrequests";

const CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
const APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

/// What the signer and approver read of a request.
struct Parsed {
    params: rcgen::CertificateSigningRequestParams,
    organizations: Vec<String>,
    common_name: String,
    dns: usize,
    ips: usize,
    other_sans: usize,
}

/// The controller manager's CSR signing, as a test sets it and asks for it.
impl crate::sim::ApiServerSim {
    /// `--cluster-signing-duration`: how long the certificates CSRs get are valid.
    pub fn set_signing_duration(&self, d: Duration) {
        self.signing_dating().0 = Some(d);
    }

    /// How far back the signer dates a certificate's start (the controller manager's 5
    /// minutes unless set): tests of rotation make lifetimes short with 0.
    pub fn set_signing_backdate(&self, d: Duration) {
        self.signing_dating().1 = Some(d);
    }

    fn signing_dating(&self) -> std::sync::MutexGuard<'_, (Option<Duration>, Option<Duration>)> {
        self.signing.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn signing(&self) -> Dating {
        let (duration, backdate) = *self.signing_dating();
        Dating {
            duration: duration.unwrap_or(crate::ca::YEAR),
            backdate: backdate.unwrap_or(Duration::from_secs(300)),
        }
    }

    /// `kubectl certificate approve NAME`: the CSR approved (and then signed, when its
    /// signer is one of the controller manager's).
    pub fn approve_csr(&self, name: &str) -> Result<Value, Value> {
        let mut store = self.lock();
        let body = serde_json::json!({"status": {"conditions": [{
            "type": "Approved", "status": "True", "reason": "KubectlApprove",
            "message": "This CSR was approved by kubectl certificate approve.",
            "lastUpdateTime": crate::store::now_rfc3339(),
        }]}});
        let approved = set_approval(&mut store, name, &body)?;
        if let Ok(ca) = self.cluster_ca() {
            sign(&mut store, ca, self.signing(), name);
        }
        Ok(approved)
    }
}

fn invalid(field: &str, message: &str) -> Value {
    status(
        422,
        "Invalid",
        format!("CertificateSigningRequest.certificates.k8s.io is invalid: {field}: {message}"),
    )
}

fn parse(object: &Value) -> Result<Parsed, Value> {
    let b64 = object["spec"]["request"].as_str().unwrap_or_default();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default();
    if !pem.contains("-----BEGIN CERTIFICATE REQUEST-----") {
        return Err(invalid(
            "spec.request",
            "Invalid value: []byte{...}: PEM block type must be CERTIFICATE REQUEST",
        ));
    }
    let params = rcgen::CertificateSigningRequestParams::from_pem(&pem).map_err(|e| {
        invalid(
            "spec.request",
            &format!("Invalid value: []byte{{...}}: {e}"),
        )
    })?;
    let dn = &params.params.distinguished_name;
    let text = |v: &rcgen::DnValue| match v {
        rcgen::DnValue::Utf8String(s) => s.clone(),
        rcgen::DnValue::PrintableString(s) => s.as_str().to_owned(),
        rcgen::DnValue::Ia5String(s) => s.as_str().to_owned(),
        other => format!("{other:?}"),
    };
    let organizations = dn
        .iter()
        .filter(|(t, _)| **t == rcgen::DnType::OrganizationName)
        .map(|(_, v)| text(v))
        .collect();
    let common_name = dn
        .get(&rcgen::DnType::CommonName)
        .map(text)
        .unwrap_or_default();
    let sans = &params.params.subject_alt_names;
    let dns = sans
        .iter()
        .filter(|s| matches!(s, rcgen::SanType::DnsName(_)))
        .count();
    let ips = sans
        .iter()
        .filter(|s| matches!(s, rcgen::SanType::IpAddress(_)))
        .count();
    let other_sans = sans.len() - dns - ips;
    Ok(Parsed {
        params,
        organizations,
        common_name,
        dns,
        ips,
        other_sans,
    })
}

fn usages(object: &Value) -> Vec<String> {
    object["spec"]["usages"]
        .as_array()
        .map(|u| {
            u.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn same(usages: &[String], want: &[&str]) -> bool {
    let mut a: Vec<&str> = usages.iter().map(String::as_str).collect();
    a.sort_unstable();
    a.dedup();
    let mut b = want.to_vec();
    b.sort_unstable();
    a == b
}

/// A node client certificate request (the kubelet's, as the controller manager
/// recognizes it).
fn node_client(object: &Value, p: &Parsed) -> Result<(), String> {
    if p.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if p.dns + p.ips + p.other_sans > 0 {
        return Err("a client certificate request must not have subject alternative names".into());
    }
    if !p.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    let u = usages(object);
    if !same(&u, &["digital signature", "client auth"])
        && !same(
            &u,
            &["digital signature", "key encipherment", "client auth"],
        )
    {
        return Err(format!(
            "usages {u:?} are not digital signature and client auth"
        ));
    }
    Ok(())
}

/// A kubelet serving certificate request.
fn kubelet_serving(object: &Value, p: &Parsed) -> Result<(), String> {
    if p.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if !p.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    if p.dns + p.ips == 0 {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if p.other_sans > 0 {
        return Err("email and URI subjectAltNames are not allowed".into());
    }
    let u = usages(object);
    if !same(
        &u,
        &["digital signature", "key encipherment", "server auth"],
    ) && !same(&u, &["digital signature", "server auth"])
    {
        return Err(format!(
            "usages {u:?} are not digital signature, key encipherment and server auth"
        ));
    }
    Ok(())
}

/// Who asked, as `spec.username` / `spec.groups` record it.
fn requester(object: &Value) -> Identity {
    Identity {
        user: object["spec"]["username"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        groups: object["spec"]["groups"]
            .as_array()
            .map(|g| {
                g.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// The API server's checks and fields for a new CSR (the object to store).
pub(crate) fn admit(identity: Option<&Identity>, mut object: Value) -> Result<Value, Value> {
    let p = parse(&object)?;
    let signer = object["spec"]["signerName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if signer.is_empty() {
        return Err(invalid("spec.signerName", "Required value"));
    }
    if usages(&object).is_empty() {
        return Err(invalid("spec.usages", "Required value"));
    }
    if signer == APISERVER_CLIENT && p.organizations.iter().any(|o| o == "system:masters") {
        return Err(status(
            403,
            "Forbidden",
            format!(
                "certificatesigningrequests.certificates.k8s.io is forbidden: use of {signer} signer with system:masters group is not allowed"
            ),
        ));
    }
    let who = identity.cloned().unwrap_or_else(|| Identity {
        user: "system:anonymous".into(),
        groups: vec!["system:unauthenticated".into()],
    });
    object["spec"]["username"] = json!(who.user);
    object["spec"]["groups"] = json!(who.groups);
    object["status"] = json!({});
    Ok(object)
}

fn condition(kind: &str, reason: &str, message: &str) -> Value {
    let now = now_rfc3339();
    json!({"type": kind, "status": "True", "reason": reason, "message": message,
           "lastUpdateTime": now, "lastTransitionTime": now})
}

fn has(object: &Value, kind: &str) -> bool {
    object["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

fn add_condition(store: &mut Store, name: &str, c: Value) -> Option<Value> {
    let key = key(name);
    let mut object = store.objects.get(&key)?.clone();
    let mut conditions = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.push(c);
    object["status"]["conditions"] = json!(conditions);
    object["metadata"]["resourceVersion"] = Value::Null;
    store.write(&key, object, Some("status")).ok()
}

fn key(name: &str) -> crate::store::Key {
    (PREFIX.into(), RESOURCE.into(), String::new(), name.into())
}

/// The controller manager's approver on CSR `name`.
pub(crate) fn approve(store: &mut Store, name: &str) {
    let Some(object) = store.objects.get(&key(name)).cloned() else {
        return;
    };
    if object["spec"]["signerName"] != CLIENT_KUBELET
        || has(&object, "Approved")
        || has(&object, "Denied")
    {
        return;
    }
    let Ok(p) = parse(&object) else { return };
    if node_client(&object, &p).is_err() {
        return;
    }
    let who = requester(&object);
    let prefix = "system:certificates.k8s.io:certificatesigningrequests:";
    let message =
        if who.user == p.common_name && bound(store, &who, &format!("{prefix}selfnodeclient")) {
            "Auto approving self kubelet client certificate after SubjectAccessReview."
        } else if bound(store, &who, &format!("{prefix}nodeclient")) {
            "Auto approving kubelet client certificate after SubjectAccessReview."
        } else {
            return;
        };
    add_condition(store, name, condition("Approved", "AutoApproved", message));
}

/// The controller manager's signer on CSR `name`: a certificate, or `Failed`.
pub(crate) fn sign(store: &mut Store, ca: &ClusterCa, dating: Dating, name: &str) {
    let Some(object) = store.objects.get(&key(name)).cloned() else {
        return;
    };
    let signer = object["spec"]["signerName"].as_str().unwrap_or_default();
    let ours = [CLIENT_KUBELET, KUBELET_SERVING, APISERVER_CLIENT].contains(&signer);
    let issued = object["status"]["certificate"]
        .as_str()
        .is_some_and(|c| !c.is_empty());
    if !ours || !has(&object, "Approved") || has(&object, "Failed") || issued {
        return;
    }
    let checked = parse(&object)
        .map_err(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .and_then(|p| {
            match signer {
                CLIENT_KUBELET => node_client(&object, &p),
                KUBELET_SERVING => kubelet_serving(&object, &p),
                _ => Ok(()),
            }
            .map(|()| p)
        });
    let p = match checked {
        Ok(p) => p,
        Err(why) => {
            add_condition(
                store,
                name,
                condition("Failed", "SignerValidationFailure", &why),
            );
            return;
        }
    };
    match issue(ca, dating, &object, p) {
        Ok(pem) => {
            let mut o = object;
            o["status"]["certificate"] =
                json!(base64::engine::general_purpose::STANDARD.encode(pem));
            o["metadata"]["resourceVersion"] = Value::Null;
            let _ = store.write(&key(name), o, Some("status"));
        }
        Err(why) => {
            add_condition(store, name, condition("Failed", "SignerError", &why));
        }
    }
}

/// How the signer dates certificates: `--cluster-signing-duration` and how far back
/// the start is set (5 minutes, for clocks behind; a knob of the double).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dating {
    pub duration: Duration,
    pub backdate: Duration,
}

/// The certificate for `object`: the request's subject and names, the spec's usages,
/// valid from `backdate` ago for the signing duration (or `expirationSeconds`, at least
/// 10 minutes, when shorter); a certificate of 8 hours or more has its end backdated too,
/// as the signer's policy says.
fn issue(ca: &ClusterCa, dating: Dating, object: &Value, mut p: Parsed) -> Result<String, String> {
    let asked = object["spec"]["expirationSeconds"]
        .as_u64()
        .map(|s| Duration::from_secs(s.max(600)));
    let ttl = asked.map_or(dating.duration, |a| a.min(dating.duration));
    let now = time::OffsetDateTime::now_utc();
    let params = &mut p.params.params;
    params.not_before = now - dating.backdate;
    params.not_after = if ttl < Duration::from_secs(8 * 3600) {
        now + ttl
    } else {
        now + ttl - dating.backdate
    };
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = Vec::new();
    for u in usages(object) {
        match u.as_str() {
            "key encipherment" => params
                .key_usages
                .push(rcgen::KeyUsagePurpose::KeyEncipherment),
            "client auth" => params
                .extended_key_usages
                .push(rcgen::ExtendedKeyUsagePurpose::ClientAuth),
            "server auth" => params
                .extended_key_usages
                .push(rcgen::ExtendedKeyUsagePurpose::ServerAuth),
            _ => {}
        }
    }
    let cert = p.params.signed_by(&ca.issuer).map_err(|e| e.to_string())?;
    Ok(cert.pem())
}

/// `PUT …/approval`: the conditions of `body` (Approved or Denied) replace the CSR's.
pub(crate) fn set_approval(store: &mut Store, name: &str, body: &Value) -> Result<Value, Value> {
    let key = key(name);
    let Some(mut object) = store.objects.get(&key).cloned() else {
        return Err(status(
            404,
            "NotFound",
            format!("{RESOURCE}.certificates.k8s.io \"{name}\" not found"),
        ));
    };
    object["status"]["conditions"] = body["status"]["conditions"].clone();
    object["metadata"]["resourceVersion"] = body["metadata"]["resourceVersion"].clone();
    store.write(&key, object, Some("status"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cn: &str, orgs: &[&str], dns: &[&str]) -> String {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|d| (*d).to_owned()).collect::<Vec<_>>())
                .expect("params");
        params.distinguished_name = crate::ca::subject(cn, orgs);
        let pem = params
            .serialize_request(&key)
            .expect("csr")
            .pem()
            .expect("pem");
        base64::engine::general_purpose::STANDARD.encode(pem)
    }

    fn csr(name: &str, signer: &str, usages: &[&str], request: String) -> Value {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": name},
               "spec": {"request": request, "signerName": signer, "usages": usages}})
    }

    fn who(user: &str, groups: &[&str]) -> Identity {
        Identity {
            user: user.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    fn bind(store: &mut Store, role: &str, group: &str) {
        let binding = crate::tls::group_binding(&format!("{role}-{group}"), role, group);
        store
            .create(
                "apis/rbac.authorization.k8s.io/v1",
                "clusterrolebindings",
                "",
                binding,
            )
            .expect("binding");
    }

    /// Admits, stores, approves and signs as the API server and the controller manager.
    fn post(
        store: &mut Store,
        ca: &ClusterCa,
        by: &Identity,
        object: Value,
    ) -> Result<Value, Value> {
        let object = admit(Some(by), object)?;
        let created = store.create(PREFIX, RESOURCE, "", object)?;
        let name = created["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        approve(store, &name);
        let dating = Dating {
            duration: Duration::from_secs(300),
            backdate: Duration::from_secs(300),
        };
        sign(store, ca, dating, &name);
        Ok(store.objects.get(&key(&name)).cloned().unwrap_or_default())
    }

    fn condition_of(o: &Value) -> (String, String) {
        let c = &o["status"]["conditions"][0];
        (
            c["type"].as_str().unwrap_or_default().to_owned(),
            c["reason"].as_str().unwrap_or_default().to_owned(),
        )
    }

    #[test]
    fn the_approver_and_signer_follow_the_controller_managers_rules() {
        let ca = ClusterCa::new().expect("ca");
        let mut store = Store::default();
        let prefix = "system:certificates.k8s.io:certificatesigningrequests:";
        bind(
            &mut store,
            &format!("{prefix}nodeclient"),
            "system:bootstrappers",
        );
        bind(
            &mut store,
            &format!("{prefix}selfnodeclient"),
            "system:nodes",
        );
        let client = ["digital signature", "client auth"];
        let boot = who("system:bootstrap:abc", &["system:bootstrappers"]);
        let node_a = who("system:node:a", &["system:nodes"]);
        // A bootstrap token's request for a node: approved (nodeclient), signed.
        let o = post(
            &mut store,
            &ca,
            &boot,
            csr(
                "c1",
                CLIENT_KUBELET,
                &client,
                request("system:node:a", &["system:nodes"], &[]),
            ),
        )
        .expect("created");
        assert_eq!(o["spec"]["username"], "system:bootstrap:abc");
        assert_eq!(condition_of(&o), ("Approved".into(), "AutoApproved".into()));
        assert!(o["status"]["certificate"].is_string());
        // A node renewing its own: approved (selfnodeclient); another node's: not.
        let o = post(
            &mut store,
            &ca,
            &node_a,
            csr(
                "c2",
                CLIENT_KUBELET,
                &client,
                request("system:node:a", &["system:nodes"], &[]),
            ),
        )
        .expect("created");
        assert!(
            o["status"]["conditions"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("self"))
        );
        let o = post(
            &mut store,
            &ca,
            &node_a,
            csr(
                "c3",
                CLIENT_KUBELET,
                &client,
                request("system:node:b", &["system:nodes"], &[]),
            ),
        )
        .expect("created");
        assert!(o["status"]["conditions"].is_null(), "pending: {o}");
        // Serving certificates are never approved automatically; once approved, one
        // without a name fails the signer's rules.
        let serving = ["digital signature", "key encipherment", "server auth"];
        let o = post(
            &mut store,
            &ca,
            &node_a,
            csr(
                "s1",
                KUBELET_SERVING,
                &serving,
                request("system:node:a", &["system:nodes"], &[]),
            ),
        )
        .expect("created");
        assert!(o["status"]["conditions"].is_null());
        let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "KubectlApprove"}]}});
        set_approval(&mut store, "s1", &approval).expect("approve");
        sign(
            &mut store,
            &ca,
            Dating {
                duration: Duration::from_secs(60),
                backdate: Duration::ZERO,
            },
            "s1",
        );
        let o = store.objects.get(&key("s1")).cloned().expect("s1");
        assert_eq!(condition_of(&o).0, "Approved");
        assert_eq!(
            o["status"]["conditions"][1]["reason"],
            "SignerValidationFailure"
        );
        assert!(o["status"]["certificate"].is_null());
        // system:masters through kube-apiserver-client: refused at create.
        let e = post(
            &mut store,
            &ca,
            &boot,
            csr(
                "m1",
                APISERVER_CLIENT,
                &client,
                request("admin", &["system:masters"], &[]),
            ),
        )
        .expect_err("forbidden");
        assert_eq!(e["code"], 403);
        // Not a CSR at all: 422.
        let e = post(
            &mut store,
            &ca,
            &boot,
            csr("x1", CLIENT_KUBELET, &client, "bm90IGEgY3Ny".into()),
        )
        .expect_err("invalid");
        assert_eq!(e["code"], 422);
    }
}
