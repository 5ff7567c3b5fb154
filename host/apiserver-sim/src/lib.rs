//! A Kubernetes API server double: the REST paths a node agent uses, answered the way
//! the real API server answers them, over HTTP on loopback.
//!
//! No real API server can be installed on the machines wasmlet is built on, so cluster
//! mode is tested against this. It keeps objects as JSON, any resource under
//! `/api/v1` and `/apis/<group>/<version>`, namespaced or not:
//!
//! - create (`POST`): `409 AlreadyExists` for a taken name; fills in `uid`,
//!   `resourceVersion`, `creationTimestamp` (and `generateName`).
//! - get, list (`fieldSelector` with `=`, `==`, `!=` on dotted paths, e.g.
//!   `spec.nodeName=node-a`; the list carries the store's `resourceVersion`).
//! - watch (`?watch=true`): from a `resourceVersion` (the changes after it, then live
//!   ones) or from now (every current object as ADDED first), filtered by the field
//!   selector, ended by `timeoutSeconds`; a `resourceVersion` older than the kept history
//!   ([`ApiServerSim::compact`]) gets an ERROR event with a 410 `Expired` Status;
//!   [`ApiServerSim::end_watches`] drops every open watch.
//! - replace (`PUT`) and patch (`PATCH`, merge and strategic-merge treated as JSON merge
//!   patch): `409 Conflict` when the body names a `resourceVersion` that is not the
//!   current one; the `status` subresource changes only `status`, the main resource
//!   everything but `status` (for resources that have a status).
//! - TokenRequest (`POST serviceaccounts/NAME/token`) for a service account that exists.
//! - Services get a `clusterIP` from 10.96.0.0/12 unless they ask for one (or `None`);
//!   the `kubernetes` Service of `default` is there from the start (10.96.0.1:443).
//! - a pod's `spec.ephemeralContainers` changes only through its `ephemeralcontainers`
//!   subresource, with the API server's validation (unique names, never removed or
//!   changed: 422 `Invalid`); strategic merge patches merge container lists by name.
//! - a `metadata.uid` in a replace or patch body that is not the object's →
//!   `409 Conflict` (Precondition failed), as the kubelet's status patches rely on.
//! - delete: preconditions (`uid`, `resourceVersion`) → `409 Conflict`; pods are deleted
//!   gracefully (first a `deletionTimestamp` and `deletionGracePeriodSeconds`, then gone
//!   when deleted with grace 0, as the kubelet's final delete does).
//!
//! - the node proxy ([`node_proxy`]): `pods/log`, `pods/exec`, `pods/attach` and
//!   `pods/portforward` forwarded to the pod's kubelet with a client certificate,
//!   upgrades included; TokenReview and SubjectAccessReview answered from rules a test
//!   sets ([`ApiServerSim::add_token`], [`ApiServerSim::allow`]).
//!
//! - custom resources ([`crd`]): a CustomResourceDefinition created makes its resource
//!   servable (404 before, as for any group the server lacks), with its `status`
//!   subresource and `metadata.generation`; deleting it deletes its objects.
//! - server-side apply ([`apply`]): `PATCH` with `application/apply-patch+yaml`, each
//!   manager's fields in `metadata.managedFields`, conflicts unless `force`, keyed lists
//!   (`x-kubernetes-list-type: map`) merged item by item.
//! - ValidatingAdmissionPolicy ([`policy`]): the policies and bindings stored under
//!   `admissionregistration.k8s.io` refuse the updates they deny, their CEL evaluated
//!   over the object, the old object and who asks.
//!
//! Errors are `Status` objects with the API server's reasons and codes.
//!
//! Here: [`ApiServerSim`], what tests call. `store` keeps the objects and the rules of
//! each verb; `http` parses paths and answers requests (watches included); `node_proxy`
//! is the way to the kubelets and the reviews.

mod apply;
mod certificates;
mod crd;
mod defaults;
mod http;
mod log_ws;
mod node_proxy;
mod policy;
mod resize;
mod store;
mod tls;
mod values;

use crate::http::handle;
use crate::store::Store;

pub use node_proxy::DEFAULT_ADDRESS_TYPES;
pub use tls::{Identity, write_bootstrap_kubeconfig};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use serde_json::{Value, json};

/// Where an object lives: API prefix (`api/v1`, `apis/coordination.k8s.io/v1`),
/// resource (`pods`), namespace (empty for cluster-scoped), name.
type Key = (String, String, String, String);

/// A change to a stored object: ADDED, MODIFIED or DELETED.
#[derive(Debug, Clone)]
pub struct Change {
    /// ADDED, MODIFIED or DELETED.
    pub kind: &'static str,
    /// The resource (`pods`).
    pub resource: String,
    /// The namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The object as stored.
    pub object: Value,
}

/// Who may do what on nodes' subresources, and which tokens name whom.
#[derive(Default)]
struct Access {
    /// Token → (user, groups).
    tokens: BTreeMap<String, (String, Vec<String>)>,
    /// (subject: a user, or `group:NAME`; verb; subresource), `*` matching any.
    rules: Vec<(String, String, String)>,
    /// `--kubelet-preferred-address-types`; empty: the default.
    address_types: Vec<String>,
}

/// The double, shared by its server and the tests that look inside it.
#[derive(Clone, Default)]
pub struct ApiServerSim {
    store: Arc<Mutex<Store>>,
    /// Added before every write is answered (a slow API server).
    latency: Arc<Mutex<std::time::Duration>>,
    access: Arc<Mutex<Access>>,
    kubelet_client: Arc<std::sync::OnceLock<Result<node_proxy::KubeletClient, String>>>,
    /// The cluster's CA (HTTPS, client certificates, CSRs), made at first use.
    cluster_ca: Arc<std::sync::OnceLock<Result<tls::ClusterCa, String>>>,
    /// `--cluster-signing-duration` (a year unless set) and the signer's backdating (5
    /// minutes unless set).
    signing: Arc<Mutex<(Option<std::time::Duration>, Option<std::time::Duration>)>>,
}

/// A running server.
pub struct Served {
    /// Its address on loopback.
    pub addr: SocketAddr,
    https: bool,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// `http://127.0.0.1:<port>` (`https://` when served over TLS).
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops serving and drops every connection, as when an API server goes away (the
    /// store stays: serving again on the same address is the API server coming back).
    pub fn stop(self) {
        self.task.abort();
    }
}

impl ApiServerSim {
    /// An API server with what a new cluster's has: the `kubernetes` Service in
    /// `default` (10.96.0.1, port 443 `https`), which every pod's environment names.
    pub fn new() -> Self {
        let sim = Self::default();
        let _ = sim.create(
            "api/v1",
            "services",
            json!({"metadata": {"name": "kubernetes", "namespace": "default",
                                "labels": {"component": "apiserver", "provider": "kubernetes"}},
                   "spec": {"clusterIP": "10.96.0.1", "type": "ClusterIP",
                            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}}),
        );
        sim
    }

    /// Serves on `addr` (port 0: any free port).
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<Served> {
        self.serve_on(addr, None).await
    }

    /// Serves on `addr`, over TLS with `tls` (the client certificate of each
    /// connection, when verified, is who its requests come from).
    async fn serve_on(
        &self,
        addr: SocketAddr,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> std::io::Result<Served> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let app = Router::new().fallback(handle).with_state(self.clone());
        let https = tls.is_some();
        // Connections are this task's: stopping it drops them all, as a server that goes
        // away does.
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (app, tls) = (app.clone(), tls.clone());
                connections.spawn(async move {
                    let http = hyper::server::conn::http1::Builder::new();
                    let Some(tls) = tls else {
                        let service = hyper_util::service::TowerToHyperService::new(app);
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let _ = http.serve_connection(io, service).with_upgrades().await;
                        return;
                    };
                    let Ok(stream) = tls.accept(stream).await else {
                        return;
                    };
                    let peer = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(tls::certificate_identity);
                    let app = app.layer(axum::Extension(tls::PeerIdentity(peer)));
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = http.serve_connection(io, service).with_upgrades().await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Served { addr, https, task })
    }

    /// The stored object, if any (`ns` empty for cluster-scoped).
    pub fn get(&self, prefix: &str, resource: &str, ns: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(&(prefix.into(), resource.into(), ns.into(), name.into()))
            .cloned()
    }

    /// Every stored object of `resource` under `prefix`, in name order.
    pub fn list(&self, prefix: &str, resource: &str) -> Vec<Value> {
        self.lock()
            .objects
            .iter()
            .filter(|((p, r, _, _), _)| p == prefix && r == resource)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Stores `object` as if created by a client (for tests that set the scene).
    pub fn create(&self, prefix: &str, resource: &str, object: Value) -> Result<Value, Value> {
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.lock().create(prefix, resource, &ns, object)
    }

    /// Deletes as a client would (`options` is a DeleteOptions body): bound pods are
    /// deleted gracefully.
    pub fn delete(
        &self,
        prefix: &str,
        resource: &str,
        ns: &str,
        name: &str,
        options: Value,
    ) -> Result<Value, Value> {
        self.lock().delete(
            &(prefix.into(), resource.into(), ns.into(), name.into()),
            &options,
        )
    }

    /// Deletes namespace `ns` as the namespace controller does: its pods are deleted
    /// gracefully (the node's final delete removes them), everything else at once, and
    /// nothing new may be made in it — 403 `NamespaceTerminating` while something is
    /// left, 404 once it is empty.
    pub fn delete_namespace(&self, ns: &str) {
        let mut store = self.lock();
        store.deleted_namespaces.insert(ns.to_owned());
        let keys: Vec<Key> = store
            .objects
            .keys()
            .filter(|k| k.2 == ns)
            .cloned()
            .collect();
        for k in keys {
            let options = if k.1 == "pods" {
                json!({})
            } else {
                json!({"gracePeriodSeconds": 0})
            };
            let _ = store.delete(&k, &options);
        }
    }

    /// Every change from now on, as it is stored (for tests and benchmarks that time
    /// what clients write).
    pub fn subscribe(&self) -> tokio::sync::mpsc::UnboundedReceiver<Change> {
        let mut changes = self.lock().changes.subscribe();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                match changes.recv().await {
                    Ok(e) => {
                        let change = Change {
                            kind: e.kind,
                            resource: e.key.1.clone(),
                            namespace: e.key.2.clone(),
                            name: e.key.3.clone(),
                            object: e.object.clone(),
                        };
                        if tx.send(change).is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        rx
    }

    /// Makes every write (POST, PUT, PATCH, DELETE) take `latency` longer, as a busy API
    /// server does; reads and watches are not slowed.
    pub fn set_latency(&self, latency: std::time::Duration) {
        *self.latency.lock().unwrap_or_else(|p| p.into_inner()) = latency;
    }

    /// Every request served so far: (method, path).
    pub fn requests(&self) -> Vec<(String, String)> {
        self.lock().requests.clone()
    }

    /// Requests refused for their credentials: (method, path, code).
    pub fn failed_requests(&self) -> Vec<(String, String, u16)> {
        self.lock().failures.clone()
    }

    /// The watches started so far, by path (`/api/v1/pods`).
    pub fn watches_started(&self) -> Vec<String> {
        self.lock().watches.clone()
    }

    /// Forgets the change log (as etcd compaction does): a watch resuming from any
    /// resourceVersion before now gets `410 Gone` and must list again.
    pub fn compact(&self) {
        let mut store = self.lock();
        store.events.clear();
        store.oldest = store.rv;
    }

    /// Ends every open watch (the connection closes, as when the API server restarts).
    pub fn end_watches(&self) {
        self.lock().epoch.send_modify(|e| *e += 1);
    }

    /// The CA (PEM) whose client certificate the double presents to kubelets: what a
    /// kubelet's `authentication.x509.clientCAFile` names to trust it.
    pub fn kubelet_client_ca_pem(&self) -> Result<String, String> {
        self.kubelet_client().map(|c| c.ca_pem.clone())
    }

    fn kubelet_client(&self) -> Result<&node_proxy::KubeletClient, String> {
        self.kubelet_client
            .get_or_init(|| node_proxy::KubeletClient::new(None))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// `--kubelet-preferred-address-types`: the node address types tried, in order.
    pub fn set_address_types(&self, types: &[&str]) {
        self.access().address_types = types.iter().map(|t| (*t).to_owned()).collect();
    }

    fn address_types(&self) -> Vec<String> {
        let a = self.access();
        if a.address_types.is_empty() {
            DEFAULT_ADDRESS_TYPES
                .iter()
                .map(|t| (*t).to_owned())
                .collect()
        } else {
            a.address_types.clone()
        }
    }

    /// TokenReview: `token` authenticates `user` with `groups`.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.access().tokens.insert(
            token.to_owned(),
            (
                user.to_owned(),
                groups.iter().map(|g| (*g).to_owned()).collect(),
            ),
        );
    }

    fn token_user(&self, token: &str) -> Option<(String, Vec<String>)> {
        self.access().tokens.get(token).cloned()
    }

    /// SubjectAccessReview: `subject` (a user name, or `group:NAME`) may `verb` the
    /// nodes' `subresource` (`*` for any verb or subresource). Nothing else is allowed.
    pub fn allow(&self, subject: &str, verb: &str, subresource: &str) {
        self.access()
            .rules
            .push((subject.to_owned(), verb.to_owned(), subresource.to_owned()));
    }

    fn allowed(&self, user: &str, groups: &[&str], verb: &str, resource: &str, sub: &str) -> bool {
        resource == "nodes"
            && self.access().rules.iter().any(|(who, v, s)| {
                let subject = who == user
                    || who
                        .strip_prefix("group:")
                        .is_some_and(|g| groups.contains(&g));
                subject && (v == "*" || v == verb) && (s == "*" || s == sub)
            })
    }

    fn access(&self) -> std::sync::MutexGuard<'_, Access> {
        self.access.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Writes a kubeconfig at `path` naming the double at `url` (its current context, a
/// bearer token the double accepts like any other), for clients under test.
pub fn write_kubeconfig(path: &std::path::Path, url: &str) -> std::io::Result<()> {
    write_kubeconfig_as(path, url, "node-token")
}

/// As [`write_kubeconfig`], the requests carrying `token` (an identity when the double
/// knows it: [`ApiServerSim::add_token`]).
pub fn write_kubeconfig_as(path: &std::path::Path, url: &str, token: &str) -> std::io::Result<()> {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {url}\n\
             users:\n- name: node\n  user:\n    token: {token}\ncontexts:\n- name: sim\n  \
             context:\n    cluster: sim\n    user: node\ncurrent-context: sim\n"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse;
    use crate::store::{merge, now_rfc3339, selects};
    use crate::values::percent_decode;

    #[test]
    fn paths_name_resource_namespace_and_subresource() {
        let t = parse("/api/v1/nodes/n1/status").expect("path");
        assert_eq!(
            (t.prefix.as_str(), t.resource.as_str(), t.ns.as_str()),
            ("api/v1", "nodes", "")
        );
        assert_eq!(
            (t.name.as_deref(), t.sub.as_deref()),
            (Some("n1"), Some("status"))
        );
        let t = parse("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1")
            .expect("path");
        assert_eq!(t.prefix, "apis/coordination.k8s.io/v1");
        assert_eq!(
            (t.resource.as_str(), t.ns.as_str(), t.name.as_deref()),
            ("leases", "kube-node-lease", Some("n1"))
        );
        assert!(parse("/healthz").is_none());
    }

    #[test]
    fn field_selectors_and_merge_patches() {
        let pod = json!({"spec": {"nodeName": "a"}, "status": {"phase": "Running"}});
        assert!(selects(&pod, "spec.nodeName=a"));
        assert!(selects(&pod, "spec.nodeName==a,status.phase!=Failed"));
        assert!(!selects(&pod, "spec.nodeName=b"));
        assert!(selects(&pod, ""));
        assert_eq!(percent_decode("spec.nodeName%3Da"), "spec.nodeName=a");
        let mut o = json!({"a": {"b": 1, "c": 2}});
        merge(&mut o, &json!({"a": {"b": null, "d": 3}}));
        assert_eq!(o, json!({"a": {"c": 2, "d": 3}}));
    }

    #[test]
    fn stale_writes_conflict_and_status_is_its_own() {
        let mut s = Store::default();
        let node = s
            .create(
                "api/v1",
                "nodes",
                "",
                json!({"metadata": {"name": "n"}, "spec": {}, "status": {"phase": "x"}}),
            )
            .expect("create");
        assert_eq!(node["metadata"]["resourceVersion"], "1");
        let again = s.create("api/v1", "nodes", "", json!({"metadata": {"name": "n"}}));
        assert_eq!(again.expect_err("taken")["reason"], "AlreadyExists");
        let key: Key = ("api/v1".into(), "nodes".into(), "".into(), "n".into());
        // The main resource does not change status; the status subresource only does.
        let mut changed = node.clone();
        changed["spec"]["unschedulable"] = json!(true);
        changed["status"]["phase"] = json!("y");
        let stored = s.write(&key, changed.clone(), None).expect("write");
        assert_eq!(stored["status"]["phase"], "x");
        assert_eq!(stored["spec"]["unschedulable"], true);
        // The same (now stale) resourceVersion again: conflict.
        let err = s.write(&key, changed, Some("status")).expect_err("stale");
        assert_eq!(
            (err["code"].as_i64(), err["reason"].as_str()),
            (Some(409), Some("Conflict"))
        );
        let stored = s
            .write(
                &key,
                json!({"metadata": {}, "status": {"phase": "y"}}),
                Some("status"),
            )
            .expect("status");
        assert_eq!(
            (
                stored["status"]["phase"].as_str(),
                stored["spec"]["unschedulable"].as_bool()
            ),
            (Some("y"), Some(true))
        );
    }

    #[test]
    fn bound_pods_are_deleted_gracefully_and_finally_with_a_uid_precondition() {
        let mut s = Store::default();
        let pod = s
            .create("api/v1", "pods", "default", json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n", "terminationGracePeriodSeconds": 30}}))
            .expect("create");
        let key: Key = ("api/v1".into(), "pods".into(), "default".into(), "p".into());
        let marked = s.delete(&key, &json!({})).expect("graceful");
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
        let wrong = s.delete(
            &key,
            &json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "other"}}),
        );
        assert_eq!(wrong.expect_err("precondition")["code"], 409);
        s.delete(
            &key,
            &json!({"gracePeriodSeconds": 0, "preconditions": {"uid": pod["metadata"]["uid"]}}),
        )
        .expect("final delete");
        assert!(!s.objects.contains_key(&key));
    }

    #[test]
    fn services_get_cluster_ips_and_the_kubernetes_service_is_there() {
        let sim = ApiServerSim::new();
        let k = sim
            .get("api/v1", "services", "default", "kubernetes")
            .expect("kubernetes");
        assert_eq!(k["spec"]["clusterIP"], "10.96.0.1");
        let a = sim
            .create("api/v1", "services", json!({"metadata": {"name": "a", "namespace": "x"}, "spec": {"ports": [{"port": 80}]}}))
            .expect("a");
        let b = sim
            .create(
                "api/v1",
                "services",
                json!({"metadata": {"name": "b", "namespace": "x"}, "spec": {}}),
            )
            .expect("b");
        assert_eq!(a["spec"]["clusterIP"], "10.96.0.2");
        assert_eq!(b["spec"]["clusterIPs"], json!(["10.96.0.3"]));
        let headless = sim
            .create(
                "api/v1",
                "services",
                json!({"metadata": {"name": "h", "namespace": "x"}, "spec": {"clusterIP": "None"}}),
            )
            .expect("headless");
        assert_eq!(headless["spec"]["clusterIP"], "None");
    }

    #[test]
    fn ephemeral_containers_change_only_through_their_subresource_and_only_grow() {
        let mut s = Store::default();
        let pod = s
            .create(
                "api/v1",
                "pods",
                "ns",
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}}),
            )
            .expect("create");
        let key: Key = ("api/v1".into(), "pods".into(), "ns".into(), "p".into());
        let mut with = pod.clone();
        with["metadata"]["resourceVersion"] = Value::Null;
        with["spec"]["ephemeralContainers"] = json!([{"name": "debugger", "image": "busybox"}]);
        let stored = s.write(&key, with.clone(), None).expect("update");
        assert!(
            stored["spec"]["ephemeralContainers"].is_null(),
            "ignored on the pod itself"
        );
        let stored = s
            .write(&key, with.clone(), Some("ephemeralcontainers"))
            .expect("subresource");
        assert_eq!(stored["spec"]["ephemeralContainers"][0]["name"], "debugger");
        // A name already taken.
        let mut dup = with.clone();
        dup["spec"]["ephemeralContainers"] =
            json!([{"name": "debugger", "image": "busybox"}, {"name": "app"}]);
        let err = s
            .write(&key, dup, Some("ephemeralcontainers"))
            .expect_err("dup");
        assert_eq!(err["code"], 422);
        assert_eq!(
            err["message"],
            "Pod \"p\" is invalid: spec.ephemeralContainers[1].name: Duplicate value: \"app\""
        );
        // Removing one.
        let mut gone = with;
        gone["spec"]["ephemeralContainers"] = json!([]);
        let err = s
            .write(&key, gone, Some("ephemeralcontainers"))
            .expect_err("removed");
        assert_eq!(err["code"], 422);
        assert_eq!(
            err["message"],
            "Pod \"p\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be removed"
        );
        // Changing one.
        let mut changed = stored;
        changed["metadata"]["resourceVersion"] = Value::Null;
        changed["spec"]["ephemeralContainers"][0]["image"] = json!("other");
        let err = s
            .write(&key, changed, Some("ephemeralcontainers"))
            .expect_err("changed");
        assert_eq!(
            err["message"],
            "Pod \"p\" is invalid: spec.ephemeralContainers[0]: Forbidden: existing ephemeral containers \"debugger\" may not be changed"
        );
    }

    #[test]
    fn dates_are_rfc3339() {
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.starts_with("20") && now.ends_with('Z'), "{now}");
    }
}
