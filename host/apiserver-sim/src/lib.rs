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
//! Errors are `Status` objects with the API server's reasons and codes.

mod node_proxy;

pub use node_proxy::DEFAULT_ADDRESS_TYPES;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

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

/// One change, as watches see it.
#[derive(Debug, Clone)]
struct Event {
    rv: u64,
    kind: &'static str,
    key: Key,
    object: Value,
}

struct Store {
    /// The last resourceVersion handed out.
    rv: u64,
    objects: BTreeMap<Key, Value>,
    /// Changes kept for watches that resume from a resourceVersion; those older than
    /// `oldest` are compacted away (a watch from before it gets 410 Gone).
    events: std::collections::VecDeque<Event>,
    oldest: u64,
    /// Live changes for open watches.
    changes: tokio::sync::broadcast::Sender<Event>,
    /// Bumped to end every open watch (as when the API server drops connections).
    epoch: tokio::sync::watch::Sender<u64>,
    /// Requests served, by method and path (no query), for tests counting calls.
    requests: Vec<(String, String)>,
    /// Namespaces deleted ([`ApiServerSim::delete_namespace`]): nothing new is made in
    /// them.
    deleted_namespaces: std::collections::BTreeSet<String>,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            rv: 0,
            objects: BTreeMap::new(),
            events: std::collections::VecDeque::new(),
            oldest: 0,
            changes: tokio::sync::broadcast::channel(4096).0,
            epoch: tokio::sync::watch::channel(0).0,
            requests: Vec::new(),
            deleted_namespaces: Default::default(),
        }
    }
}

/// How many changes are kept for resuming watches.
const EVENT_LOG: usize = 10_000;

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
}

/// A running server.
pub struct Served {
    /// Its address on loopback.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving and drops every connection, as when an API server goes away (the
    /// store stays: serving again on the same address is the API server coming back).
    pub fn stop(self) {
        self.task.abort();
    }
}

impl ApiServerSim {
    /// An empty API server.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves on `addr` (port 0: any free port).
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<Served> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let app = Router::new().fallback(handle).with_state(self.clone());
        // Connections are this task's: stopping it drops them all, as a server that goes
        // away does.
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let service = hyper_util::service::TowerToHyperService::new(app.clone());
                connections.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Served { addr, task })
    }

    /// The stored object, if any (`ns` empty for cluster-scoped).
    pub fn get(&self, prefix: &str, resource: &str, ns: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(&(prefix.into(), resource.into(), ns.into(), name.into()))
            .cloned()
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
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {url}\n\
             users:\n- name: node\n  user:\n    token: node-token\ncontexts:\n- name: sim\n  \
             context:\n    cluster: sim\n    user: node\ncurrent-context: sim\n"
        ),
    )
}

/// The parts of a request path.
struct Target {
    prefix: String,
    resource: String,
    ns: String,
    name: Option<String>,
    sub: Option<String>,
}

fn parse(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (prefix, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => (format!("api/{v}"), rest),
        ["apis", g, v, rest @ ..] => (format!("apis/{g}/{v}"), rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => ((*ns).to_owned(), rest),
        _ => (String::new(), rest),
    };
    let (resource, name, sub) = match rest {
        [r] => (r, None, None),
        [r, n] => (r, Some(n), None),
        [r, n, s] => (r, Some(n), Some(s)),
        _ => return None,
    };
    Some(Target {
        prefix,
        resource: (*resource).to_owned(),
        ns,
        name: name.map(|n| (*n).to_owned()),
        sub: sub.map(|s| (*s).to_owned()),
    })
}

fn kind_of(resource: &str) -> String {
    match resource {
        "pods" => "Pod".into(),
        "nodes" => "Node".into(),
        "leases" => "Lease".into(),
        "events" => "Event".into(),
        "namespaces" => "Namespace".into(),
        other => {
            let mut k = other.trim_end_matches('s').to_owned();
            if let Some(first) = k.get_mut(0..1) {
                first.make_ascii_uppercase();
            }
            k
        }
    }
}

fn has_status(resource: &str) -> bool {
    matches!(resource, "pods" | "nodes" | "namespaces")
}

/// A `Status` error as the API server sends it.
fn status(code: u16, reason: &str, message: String) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    })
}

fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// A field selector term: `path=value`, `path==value` or `path!=value`.
fn selects(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let (path, want, equal) = if let Some((p, v)) = term.split_once("!=") {
            (p, v, false)
        } else if let Some((p, v)) = term.split_once("==") {
            (p, v, true)
        } else if let Some((p, v)) = term.split_once('=') {
            (p, v, true)
        } else {
            return false;
        };
        let mut at = object;
        for part in path.split('.') {
            at = &at[part];
        }
        let have = match at {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        (have == want) == equal
    })
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Store {
    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// Records a change at the current resourceVersion for watches.
    fn emit(&mut self, kind: &'static str, key: &Key, object: &Value) {
        let event = Event {
            rv: self.rv,
            kind,
            key: key.clone(),
            object: object.clone(),
        };
        if self.events.len() >= EVENT_LOG
            && let Some(dropped) = self.events.pop_front()
        {
            self.oldest = dropped.rv;
        }
        self.events.push_back(event.clone());
        let _ = self.changes.send(event);
    }

    fn create(
        &mut self,
        prefix: &str,
        resource: &str,
        ns: &str,
        mut object: Value,
    ) -> Result<Value, Value> {
        let meta = object["metadata"].as_object().cloned().unwrap_or_default();
        let name = match (
            meta.get("name").and_then(Value::as_str),
            meta.get("generateName").and_then(Value::as_str),
        ) {
            (Some(n), _) if !n.is_empty() => n.to_owned(),
            (_, Some(g)) => format!("{g}{:05x}", self.rv + 1),
            _ => {
                return Err(status(
                    422,
                    "Invalid",
                    format!(
                        "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                        kind_of(resource)
                    ),
                ));
            }
        };
        if self.deleted_namespaces.contains(ns) {
            // Terminating while something is left in it, then gone.
            return Err(if self.objects.keys().any(|k| k.2 == ns) {
                let mut s = status(
                    403,
                    "Forbidden",
                    format!(
                        "{resource} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated"
                    ),
                );
                s["details"] = json!({"name": name, "kind": resource, "causes": [{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace",
                }]});
                s
            } else {
                let mut s = status(404, "NotFound", format!("namespaces \"{ns}\" not found"));
                s["details"] = json!({"name": ns, "kind": "namespaces"});
                s
            });
        }
        let key = (
            prefix.to_owned(),
            resource.to_owned(),
            ns.to_owned(),
            name.clone(),
        );
        if self.objects.contains_key(&key) {
            return Err(status(
                409,
                "AlreadyExists",
                format!("{resource} \"{name}\" already exists"),
            ));
        }
        let rv = self.next_rv();
        let meta = object
            .as_object_mut()
            .map(|o| o.entry("metadata").or_insert_with(|| json!({})))
            .and_then(Value::as_object_mut);
        if let Some(m) = meta {
            m.insert("name".into(), json!(name));
            if !ns.is_empty() {
                m.insert("namespace".into(), json!(ns));
            }
            m.insert(
                "uid".into(),
                json!(format!("{:08x}-0000-4000-8000-{:012x}", self.rv, self.rv)),
            );
            m.insert("resourceVersion".into(), json!(rv));
            m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        }
        self.objects.insert(key.clone(), object.clone());
        self.emit("ADDED", &key, &object);
        Ok(object)
    }

    fn write(&mut self, key: &Key, new: Value, sub: Option<&str>) -> Result<Value, Value> {
        let Some(old) = self.objects.get(key).cloned() else {
            return Err(status(
                404,
                "NotFound",
                format!("{} \"{}\" not found", key.1, key.3),
            ));
        };
        // A UID in the body is a precondition: the object must still be that one.
        let uid = new["metadata"]["uid"].as_str().unwrap_or("");
        if !uid.is_empty() && uid != old["metadata"]["uid"] {
            return Err(status(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    key.1,
                    key.3,
                    old["metadata"]["uid"].as_str().unwrap_or("")
                ),
            ));
        }
        let asked = new["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if !asked.is_empty() && asked != old["metadata"]["resourceVersion"] {
            return Err(status(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                    key.1, key.3
                ),
            ));
        }
        let mut stored = if sub == Some("status") {
            let mut s = old.clone();
            s["status"] = new["status"].clone();
            s
        } else {
            let mut s = new;
            if has_status(&key.1) {
                s["status"] = old["status"].clone();
            }
            // What the server owns stays the server's.
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "namespace",
                "name",
            ] {
                if !old["metadata"][field].is_null() {
                    s["metadata"][field] = old["metadata"][field].clone();
                }
            }
            s
        };
        if stored == old {
            return Ok(old);
        }
        stored["metadata"]["resourceVersion"] = json!(self.next_rv());
        self.objects.insert(key.clone(), stored.clone());
        self.emit("MODIFIED", key, &stored);
        Ok(stored)
    }

    fn delete(&mut self, key: &Key, options: &Value) -> Result<Value, Value> {
        let Some(old) = self.objects.get(key).cloned() else {
            return Err(status(
                404,
                "NotFound",
                format!("{} \"{}\" not found", key.1, key.3),
            ));
        };
        let pre = &options["preconditions"];
        for (field, what) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
            if let Some(want) = pre[field].as_str()
                && want != old["metadata"][field]
            {
                return Err(status(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} \"{}\": Precondition failed: {what} in precondition: {want}, {what} in object meta: {}",
                        key.1,
                        key.3,
                        old["metadata"][field].as_str().unwrap_or("")
                    ),
                ));
            }
        }
        let grace = options["gracePeriodSeconds"]
            .as_i64()
            .or_else(|| old["metadata"]["deletionGracePeriodSeconds"].as_i64())
            .or_else(|| old["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(30);
        // A pod bound to a node is deleted gracefully: marked first, gone when the
        // kubelet deletes it with grace 0.
        let bound = key.1 == "pods"
            && old["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty());
        if bound && grace > 0 {
            let mut marked = old.clone();
            if marked["metadata"]["deletionTimestamp"].is_null() {
                marked["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            }
            let shorter = marked["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .map_or(grace, |g| g.min(grace));
            marked["metadata"]["deletionGracePeriodSeconds"] = json!(shorter);
            marked["metadata"]["resourceVersion"] = json!(self.next_rv());
            self.objects.insert(key.clone(), marked.clone());
            self.emit("MODIFIED", key, &marked);
            return Ok(marked);
        }
        self.objects.remove(key);
        let mut gone = old.clone();
        gone["metadata"]["resourceVersion"] = json!(self.next_rv());
        self.emit("DELETED", key, &gone);
        Ok(old)
    }
}

fn reply(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn error(body: Value) -> Response {
    let code = body["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    reply(code, &body)
}

async fn handle(State(sim): State<ApiServerSim>, request: Request) -> Response {
    let method = request.method().clone();
    if method != Method::GET {
        let latency = *sim.latency.lock().unwrap_or_else(|p| p.into_inner());
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }
    let path = request.uri().path().to_owned();
    if let Some(Target {
        prefix,
        resource,
        ns,
        name: Some(name),
        sub: Some(sub),
    }) = parse(&path)
        && prefix == "api/v1"
        && resource == "pods"
        && matches!(sub.as_str(), "log" | "exec" | "attach" | "portforward")
    {
        sim.lock().requests.push((method.to_string(), path.clone()));
        return node_proxy::handle(sim, ns, name, sub, request).await;
    }
    let query = request.uri().query().unwrap_or("").to_owned();
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body: Bytes = match axum::body::to_bytes(request.into_body(), 16 << 20).await {
        Ok(b) => b,
        Err(e) => return error(status(400, "BadRequest", format!("reading the body: {e}"))),
    };
    if method == Method::POST
        && matches!(
            path.as_str(),
            "/apis/authentication.k8s.io/v1/tokenreviews"
                | "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        )
    {
        sim.lock().requests.push((method.to_string(), path.clone()));
        let Ok(review) = serde_json::from_slice::<Value>(&body) else {
            return error(status(400, "BadRequest", "the body is not JSON".into()));
        };
        let resource = path.rsplit('/').next().unwrap_or_default();
        return reply(
            StatusCode::CREATED,
            &node_proxy::review(&sim, resource, &review),
        );
    }
    let mut store = sim.lock();
    store.requests.push((method.to_string(), path.clone()));
    let Some(t) = parse(&path) else {
        return error(status(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        ));
    };
    let json_body = || -> Result<Value, Value> {
        if body.is_empty() {
            return Ok(Value::Object(Map::new()));
        }
        serde_json::from_slice(&body)
            .map_err(|e| status(400, "BadRequest", format!("the body is not JSON: {e}")))
    };
    let key = |name: &str| {
        (
            t.prefix.clone(),
            t.resource.clone(),
            t.ns.clone(),
            name.to_owned(),
        )
    };
    let watching = matches!(query_param(&query, "watch").as_deref(), Some("true" | "1"));
    match (method, t.name.as_deref()) {
        (Method::GET, None) if watching => watch(&mut store, &t, &query),
        (Method::GET, None) => {
            let selector = query_param(&query, "fieldSelector").unwrap_or_default();
            let items: Vec<Value> = store
                .objects
                .iter()
                .filter(|((p, r, ns, _), _)| {
                    *p == t.prefix && *r == t.resource && (t.ns.is_empty() || *ns == t.ns)
                })
                .map(|(_, o)| o)
                .filter(|o| selects(o, &selector))
                .cloned()
                .collect();
            let api_version = t
                .prefix
                .trim_start_matches("api/")
                .trim_start_matches("apis/");
            reply(
                StatusCode::OK,
                &json!({
                    "kind": format!("{}List", kind_of(&t.resource)),
                    "apiVersion": api_version,
                    "metadata": {"resourceVersion": store.rv.to_string()},
                    "items": items,
                }),
            )
        }
        // TokenRequest: a token for an existing service account.
        (Method::POST, Some(name))
            if t.resource == "serviceaccounts" && t.sub.as_deref() == Some("token") =>
        {
            if !store.objects.contains_key(&key(name)) {
                return error(status(
                    404,
                    "NotFound",
                    format!("serviceaccounts \"{name}\" not found"),
                ));
            }
            let request = match json_body() {
                Ok(r) => r,
                Err(e) => return error(e),
            };
            let n = store.next_rv();
            reply(
                StatusCode::CREATED,
                &json!({
                    "kind": "TokenRequest",
                    "apiVersion": "authentication.k8s.io/v1",
                    "metadata": {"name": name, "namespace": t.ns},
                    "spec": request["spec"],
                    "status": {"token": format!("sim-token.{}.{name}.{n}", t.ns), "expirationTimestamp": now_rfc3339()},
                }),
            )
        }
        (Method::POST, None) => match json_body() {
            Ok(object) => match store.create(&t.prefix, &t.resource, &t.ns, object) {
                Ok(o) => reply(StatusCode::CREATED, &o),
                Err(e) => error(e),
            },
            Err(e) => error(e),
        },
        (Method::GET, Some(name)) => match store.objects.get(&key(name)) {
            Some(o) => reply(StatusCode::OK, o),
            None => error(status(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", t.resource),
            )),
        },
        (Method::PUT, Some(name)) => match json_body() {
            Ok(object) => match store.write(&key(name), object, t.sub.as_deref()) {
                Ok(o) => reply(StatusCode::OK, &o),
                Err(e) => error(e),
            },
            Err(e) => error(e),
        },
        (Method::PATCH, Some(name)) => {
            if content_type.starts_with("application/json-patch") {
                return error(status(
                    415,
                    "UnsupportedMediaType",
                    format!("the double applies merge patches only, not {content_type}"),
                ));
            }
            let patch = match json_body() {
                Ok(p) => p,
                Err(e) => return error(e),
            };
            let Some(mut object) = store.objects.get(&key(name)).cloned() else {
                return error(status(
                    404,
                    "NotFound",
                    format!("{} \"{name}\" not found", t.resource),
                ));
            };
            let asked = patch["metadata"]["resourceVersion"].clone();
            merge(&mut object, &patch);
            object["metadata"]["resourceVersion"] = if asked.is_string() {
                asked
            } else {
                Value::Null
            };
            match store.write(&key(name), object, t.sub.as_deref()) {
                Ok(o) => reply(StatusCode::OK, &o),
                Err(e) => error(e),
            }
        }
        (Method::DELETE, Some(name)) => match json_body() {
            Ok(options) => match store.delete(&key(name), &options) {
                Ok(o) => reply(StatusCode::OK, &o),
                Err(e) => error(e),
            },
            Err(e) => error(e),
        },
        (m, _) => error(status(
            405,
            "MethodNotAllowed",
            format!("{m} is not supported on {path}"),
        )),
    }
}

/// A watch: newline-delimited `{"type": ..., "object": ...}` events, from the changes
/// after `resourceVersion` (or, without one, every current object as ADDED), then live
/// ones, until `timeoutSeconds` or [`ApiServerSim::end_watches`]. A resourceVersion older
/// than the change log gets one ERROR event with a 410 `Expired` Status, as the API
/// server answers.
fn watch(store: &mut Store, t: &Target, query: &str) -> Response {
    let selector = query_param(query, "fieldSelector").unwrap_or_default();
    let from = query_param(query, "resourceVersion").unwrap_or_default();
    let timeout = query_param(query, "timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1800);
    let ours = {
        let (prefix, resource, ns) = (t.prefix.clone(), t.resource.clone(), t.ns.clone());
        let selector = selector.clone();
        move |e: &Event| {
            e.key.0 == prefix
                && e.key.1 == resource
                && (ns.is_empty() || e.key.2 == ns)
                && selects(&e.object, &selector)
        }
    };
    let line = |kind: &str, object: &Value| {
        let mut text = json!({"type": kind, "object": object}).to_string();
        text.push('\n');
        Bytes::from(text)
    };
    let mut first: Vec<Bytes> = Vec::new();
    let after = store.rv;
    match from.parse::<u64>() {
        Ok(rv) if rv > 0 => {
            if rv < store.oldest {
                let gone = status(
                    410,
                    "Expired",
                    format!("too old resource version: {rv} ({})", store.oldest),
                );
                let body = line("ERROR", &gone);
                return (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/json")],
                    body,
                )
                    .into_response();
            }
            for e in store.events.iter().filter(|e| e.rv > rv && ours(e)) {
                first.push(line(e.kind, &e.object));
            }
        }
        _ => {
            for (key, object) in &store.objects {
                let e = Event {
                    rv: 0,
                    kind: "ADDED",
                    key: key.clone(),
                    object: object.clone(),
                };
                if ours(&e) {
                    first.push(line("ADDED", object));
                }
            }
        }
    }
    let mut live = store.changes.subscribe();
    let mut epoch = store.epoch.subscribe();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    tokio::spawn(async move {
        for b in first {
            if tx.send(Ok(b)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(std::time::Duration::from_secs(timeout));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut deadline => return,
                _ = epoch.changed() => return,
                got = live.recv() => match got {
                    Ok(e) if e.rv > after && ours(&e) => {
                        if tx.send(Ok(line(e.kind, &e.object))).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    // Fell behind: end the watch; the client resumes or relists.
                    Err(_) => return,
                },
            }
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn dates_are_rfc3339() {
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.starts_with("20") && now.ends_with('Z'), "{now}");
    }
}
