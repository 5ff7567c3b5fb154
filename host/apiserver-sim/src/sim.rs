//! [`ApiServerSim`], the double tests hold: its store, who may do what, the node proxy's
//! client, and the server it runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::ca::{CaError, ClusterCa};
use crate::kubelet_client::{DEFAULT_ADDRESS_TYPES, KubeletClient};
use crate::store::{Key, Store};

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
pub(crate) struct Access {
    /// Token → (user, groups).
    pub(crate) tokens: BTreeMap<String, (String, Vec<String>)>,
    /// (subject: a user, or `group:NAME`; verb; subresource), `*` matching any.
    pub(crate) rules: Vec<(String, String, String)>,
    /// `--kubelet-preferred-address-types`; empty: the default.
    pub(crate) address_types: Vec<String>,
}

/// The double, shared by its server and the tests that look inside it.
#[derive(Clone, Default)]
pub struct ApiServerSim {
    pub(crate) store: Arc<Mutex<Store>>,
    /// Added before every write is answered (a slow API server).
    pub(crate) latency: Arc<Mutex<std::time::Duration>>,
    pub(crate) access: Arc<Mutex<Access>>,
    pub(crate) kubelet_client: Arc<std::sync::OnceLock<Result<KubeletClient, CaError>>>,
    /// The cluster's CA (HTTPS, client certificates, CSRs), made at first use.
    pub(crate) cluster_ca: Arc<std::sync::OnceLock<Result<ClusterCa, CaError>>>,
    /// `--cluster-signing-duration` (a year unless set) and the signer's backdating (5
    /// minutes unless set).
    pub(crate) signing: Arc<Mutex<(Option<std::time::Duration>, Option<std::time::Duration>)>>,
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
    pub fn kubelet_client_ca_pem(&self) -> Result<String, CaError> {
        self.kubelet_client().map(|c| c.ca_pem.clone())
    }

    /// The cluster CA, made at first use.
    pub(crate) fn cluster_ca(&self) -> Result<&ClusterCa, CaError> {
        self.cluster_ca
            .get_or_init(ClusterCa::new)
            .as_ref()
            .map_err(Clone::clone)
    }

    pub(crate) fn kubelet_client(&self) -> Result<&KubeletClient, CaError> {
        self.kubelet_client
            .get_or_init(|| KubeletClient::new(None))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// `--kubelet-preferred-address-types`: the node address types tried, in order.
    pub fn set_address_types(&self, types: &[&str]) {
        self.access().address_types = types.iter().map(|t| (*t).to_owned()).collect();
    }

    pub(crate) fn address_types(&self) -> Vec<String> {
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

    pub(crate) fn token_user(&self, token: &str) -> Option<(String, Vec<String>)> {
        self.access().tokens.get(token).cloned()
    }

    /// SubjectAccessReview: `subject` (a user name, or `group:NAME`) may `verb` the
    /// nodes' `subresource` (`*` for any verb or subresource). Nothing else is allowed.
    pub fn allow(&self, subject: &str, verb: &str, subresource: &str) {
        self.access()
            .rules
            .push((subject.to_owned(), verb.to_owned(), subresource.to_owned()));
    }

    pub(crate) fn allowed(
        &self,
        user: &str,
        groups: &[&str],
        verb: &str,
        resource: &str,
        sub: &str,
    ) -> bool {
        resource == "nodes"
            && self.access().rules.iter().any(|(who, v, s)| {
                let subject = who == user
                    || who
                        .strip_prefix("group:")
                        .is_some_and(|g| groups.contains(&g));
                subject && (v == "*" || v == verb) && (s == "*" || s == sub)
            })
    }

    pub(crate) fn access(&self) -> std::sync::MutexGuard<'_, Access> {
        self.access.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }
}
