//! The store: objects as JSON by key, resourceVersions, the change history watches
//! resume from, and the rules of create, replace, patch and delete.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::crd::{self, Crd};
pub(crate) use crate::values::{now_rfc3339, status};

/// Where an object lives: API prefix (`api/v1`, `apis/coordination.k8s.io/v1`),
/// resource (`pods`), namespace (empty for cluster-scoped), name.
pub(crate) type Key = (String, String, String, String);

/// One change, as watches see it; shared by every watch it reaches, and encoded for the
/// wire once however many watches send it (the API server's watch cache does the same).
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) rv: u64,
    pub(crate) kind: &'static str,
    pub(crate) key: Key,
    pub(crate) object: Value,
    line: std::sync::OnceLock<axum::body::Bytes>,
}

impl Event {
    pub(crate) fn new(rv: u64, kind: &'static str, key: Key, object: Value) -> Event {
        Event {
            rv,
            kind,
            key,
            object,
            line: std::sync::OnceLock::new(),
        }
    }

    /// The watch stream's line for this change: `{"type": ..., "object": ...}` and a
    /// newline.
    pub(crate) fn line(&self) -> axum::body::Bytes {
        self.line
            .get_or_init(|| watch_line(self.kind, &self.object))
            .clone()
    }
}

/// One line of a watch stream, `type` before `object` as the API server writes it (a
/// client reading the type first can decode the object straight into its type).
pub(crate) fn watch_line(kind: &str, object: &Value) -> axum::body::Bytes {
    let mut text = format!("{{\"type\":{},\"object\":", Value::from(kind));
    text.push_str(&object.to_string());
    text.push_str("}\n");
    axum::body::Bytes::from(text)
}

pub(crate) struct Store {
    /// The last resourceVersion handed out.
    pub(crate) rv: u64,
    pub(crate) objects: BTreeMap<Key, Value>,
    /// Changes kept for watches that resume from a resourceVersion; those older than
    /// `oldest` are compacted away (a watch from before it gets 410 Gone).
    pub(crate) events: std::collections::VecDeque<std::sync::Arc<Event>>,
    pub(crate) oldest: u64,
    /// Live changes for open watches.
    pub(crate) changes: tokio::sync::broadcast::Sender<std::sync::Arc<Event>>,
    /// Bumped to end every open watch (as when the API server drops connections).
    pub(crate) epoch: tokio::sync::watch::Sender<u64>,
    /// Requests served, by method and path (no query), for tests counting calls.
    pub(crate) requests: Vec<(String, String)>,
    /// Requests refused for their credentials (method, path, code).
    pub(crate) failures: Vec<(String, String, u16)>,
    /// Watches started, by path.
    pub(crate) watches: Vec<String>,
    /// Namespaces deleted ([`ApiServerSim::delete_namespace`]): nothing new is made in
    /// them.
    pub(crate) deleted_namespaces: std::collections::BTreeSet<String>,
    /// The last Service cluster IP handed out (within 10.96.0.0/12, as the default
    /// `--service-cluster-ip-range`).
    pub(crate) service_ips: u32,
    /// Custom resources served, by (prefix, plural), from the CustomResourceDefinitions
    /// stored.
    pub(crate) crds: BTreeMap<(String, String), Crd>,
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
            failures: Vec::new(),
            watches: Vec::new(),
            deleted_namespaces: Default::default(),
            service_ips: 0,
            crds: BTreeMap::new(),
        }
    }
}

/// How many changes are kept for resuming watches.
pub(crate) const EVENT_LOG: usize = 10_000;

pub(crate) fn kind_of(resource: &str) -> String {
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

fn built_in_status(resource: &str) -> bool {
    matches!(
        resource,
        "pods" | "nodes" | "namespaces" | "certificatesigningrequests"
    )
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
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
pub(crate) fn selects(object: &Value, selector: &str) -> bool {
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

impl Store {
    pub(crate) fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// Records a change at the current resourceVersion for watches.
    pub(crate) fn emit(&mut self, kind: &'static str, key: &Key, object: &Value) {
        let event = std::sync::Arc::new(Event::new(self.rv, kind, key.clone(), object.clone()));
        if self.events.len() >= EVENT_LOG
            && let Some(dropped) = self.events.pop_front()
        {
            self.oldest = dropped.rv;
        }
        self.events.push_back(event.clone());
        let _ = self.changes.send(event);
    }

    pub(crate) fn create(
        &mut self,
        prefix: &str,
        resource: &str,
        ns: &str,
        mut object: Value,
    ) -> Result<Value, Value> {
        let name = self.new_name(resource, &object)?;
        self.namespace_open(resource, ns, &name)?;
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
        if resource == "services" {
            self.allocate_cluster_ip(&mut object)?;
        }
        if resource == "pods" && prefix == "api/v1" {
            crate::defaults::pod(&mut object);
        }
        let custom = self.crds.contains_key(&(key.0.clone(), key.1.clone()));
        if prefix == crd::PREFIX && resource == crd::RESOURCE {
            object["metadata"]["name"] = json!(name);
            for (served, definition) in crd::versions(&object)? {
                self.crds.insert(served, definition);
            }
            object = crd::established(object);
        }
        let rv = self.next_rv();
        let uid = format!("{:08x}-0000-4000-8000-{:012x}", self.rv, self.rv);
        stamp(&mut object, (&name, ns), &uid, &rv, custom);
        self.objects.insert(key.clone(), object.clone());
        self.emit("ADDED", &key, &object);
        Ok(object)
    }

    /// The new object's name: its own, or its generateName with a suffix; else the API
    /// server's 422.
    fn new_name(&self, resource: &str, object: &Value) -> Result<String, Value> {
        let meta = &object["metadata"];
        match (meta["name"].as_str(), meta["generateName"].as_str()) {
            (Some(n), _) if !n.is_empty() => Ok(n.to_owned()),
            (_, Some(g)) => Ok(format!("{g}{:05x}", self.rv + 1)),
            _ => Err(status(
                422,
                "Invalid",
                format!(
                    "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                    kind_of(resource)
                ),
            )),
        }
    }

    /// Whether namespace `ns` takes new objects: a deleted one is terminating (403
    /// NamespaceTerminating) while something is left in it, then gone (404).
    fn namespace_open(&self, resource: &str, ns: &str, name: &str) -> Result<(), Value> {
        if !self.deleted_namespaces.contains(ns) {
            return Ok(());
        }
        Err(if self.objects.keys().any(|k| k.2 == ns) {
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
        })
    }

    /// A Service's `clusterIP` (and `clusterIPs`): the one asked for, or the next free
    /// one; `None` (headless) and ExternalName Services get none.
    fn allocate_cluster_ip(&mut self, object: &mut Value) -> Result<(), Value> {
        if object["spec"]["type"] == "ExternalName" {
            return Ok(());
        }
        let asked = object["spec"]["clusterIP"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let ip = if asked.is_empty() {
            self.service_ips += 1;
            if self.service_ips >= 1 << 20 {
                return Err(status(
                    500,
                    "InternalError",
                    "failed to allocate a serviceIP: range is full".into(),
                ));
            }
            // 10.96.0.0/12; .1 is the `kubernetes` Service's.
            let n = 0x0a60_0000u32 + self.service_ips + 1;
            std::net::Ipv4Addr::from(n).to_string()
        } else {
            asked
        };
        if object["spec"].is_null() {
            object["spec"] = json!({});
        }
        object["spec"]["clusterIP"] = json!(ip);
        object["spec"]["clusterIPs"] = json!([ip]);
        Ok(())
    }

    pub(crate) fn write(
        &mut self,
        key: &Key,
        new: Value,
        sub: Option<&str>,
    ) -> Result<Value, Value> {
        let (old, stored) = self.updated(key, new, sub)?;
        self.put(key, &old, stored)
    }

    /// The object at `key` and what a replace of it with `new` (through subresource
    /// `sub`) would store: the preconditions checked, the fields the subresource does
    /// not change kept.
    pub(crate) fn updated(
        &self,
        key: &Key,
        new: Value,
        sub: Option<&str>,
    ) -> Result<(Value, Value), Value> {
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
        let stored = if sub == Some("status") {
            let mut s = old.clone();
            s["status"] = new["status"].clone();
            s
        } else if key.1 == "pods" && sub == Some("resize") {
            crate::resize::resized(&old, &new, &key.3)?
        } else if key.1 == "pods" && sub == Some("ephemeralcontainers") {
            let mut s = old.clone();
            s["spec"]["ephemeralContainers"] = new["spec"]["ephemeralContainers"].clone();
            check_ephemeral(&old, &s, &key.3)?;
            s
        } else {
            replaced(&old, new, key, self.has_status(key))
        };
        Ok((old, stored))
    }

    /// Stores `new` over `old` (a change only when they differ): the next
    /// resourceVersion, a custom resource's generation counted up when more than its
    /// metadata or status changed, a MODIFIED event.
    pub(crate) fn put(&mut self, key: &Key, old: &Value, mut new: Value) -> Result<Value, Value> {
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if new == *old {
            return Ok(new);
        }
        if let Some(generation) = old["metadata"]["generation"].as_i64()
            && crd::generation_changed(old, &new)
        {
            new["metadata"]["generation"] = json!(generation + 1);
        }
        new["metadata"]["resourceVersion"] = json!(self.next_rv());
        // Deleted, its grace over, and its last finalizer taken off: gone now.
        if !new["metadata"]["deletionTimestamp"].is_null()
            && finalizers(&new) == 0
            && new["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0)
        {
            self.objects.remove(key);
            self.emit("DELETED", key, &new);
            return Ok(new);
        }
        self.objects.insert(key.clone(), new.clone());
        self.emit("MODIFIED", key, &new);
        Ok(new)
    }

    /// Whether the object at `key` has a status only its `status` subresource changes.
    pub(crate) fn has_status(&self, key: &Key) -> bool {
        match self.crds.get(&(key.0.clone(), key.1.clone())) {
            Some(definition) => definition.status,
            None => built_in_status(&key.1),
        }
    }

    /// A deleted CRD's custom resources go with it.
    fn remove_custom_resources(&mut self, definition: &str) {
        let served: Vec<(String, String)> = self
            .crds
            .iter()
            .filter(|(_, c)| c.definition == definition)
            .map(|(k, _)| k.clone())
            .collect();
        for (prefix, plural) in served {
            self.crds.remove(&(prefix.clone(), plural.clone()));
            let objects: Vec<Key> = self
                .objects
                .keys()
                .filter(|k| k.0 == prefix && k.1 == plural)
                .cloned()
                .collect();
            for k in objects {
                let _ = self.delete(&k, &json!({}));
            }
        }
    }

    pub(crate) fn delete(&mut self, key: &Key, options: &Value) -> Result<Value, Value> {
        let Some(old) = self.objects.get(key).cloned() else {
            return Err(status(
                404,
                "NotFound",
                format!("{} \"{}\" not found", key.1, key.3),
            ));
        };
        preconditions(key, &old, &options["preconditions"])?;
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
        // With finalizers (or a bound pod's grace) the object is only marked: a
        // deletionTimestamp, the grace left; it goes when the last finalizer is taken off
        // with no grace left (what the API server does).
        if (bound && grace > 0) || finalizers(&old) > 0 {
            let mut marked = old.clone();
            if marked["metadata"]["deletionTimestamp"].is_null() {
                marked["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            }
            // Only a bound pod is deleted gracefully; anything else has no grace.
            let grace = if bound { grace } else { 0 };
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
        if key.0 == crd::PREFIX && key.1 == crd::RESOURCE {
            self.remove_custom_resources(&key.3);
        }
        Ok(old)
    }
}

/// What a replace of `old` with `new` on the main resource stores: the status kept
/// (where the resource has the subresource), ephemeral containers kept (they change
/// only through theirs), and what the server owns in metadata kept the server's.
fn replaced(old: &Value, new: Value, key: &Key, has_status: bool) -> Value {
    let mut s = new;
    if has_status {
        s["status"] = old["status"].clone();
    }
    if key.1 == "pods" {
        match old["spec"].get("ephemeralContainers") {
            Some(ec) => s["spec"]["ephemeralContainers"] = ec.clone(),
            None => {
                if let Some(spec) = s["spec"].as_object_mut() {
                    spec.remove("ephemeralContainers");
                }
            }
        }
    }
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "namespace",
        "name",
        "generation",
        "managedFields",
    ] {
        if !old["metadata"][field].is_null() {
            s["metadata"][field] = old["metadata"][field].clone();
        }
    }
    s
}

/// A delete's preconditions (UID, resourceVersion) held against the object, or the 409.
fn preconditions(key: &Key, old: &Value, pre: &Value) -> Result<(), Value> {
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
    Ok(())
}

/// How many finalizers hold `object`.
fn finalizers(object: &Value) -> usize {
    object["metadata"]["finalizers"]
        .as_array()
        .map_or(0, Vec::len)
}

/// The API server's rules for a pod's ephemeral containers: names unique among all the
/// pod's containers, and the ones already there neither changed nor removed.
fn check_ephemeral(old: &Value, new: &Value, pod: &str) -> Result<(), Value> {
    let invalid = |field: String, what: String| {
        let mut s = status(
            422,
            "Invalid",
            format!("Pod \"{pod}\" is invalid: {field}: {what}"),
        );
        s["details"] = json!({"name": pod, "kind": "Pod", "causes": [{"reason": "FieldValueInvalid", "field": field}]});
        s
    };
    let names = |list: &str| -> Vec<String> {
        new["spec"][list]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| c["name"].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut seen: std::collections::BTreeSet<String> = names("containers").into_iter().collect();
    seen.extend(names("initContainers"));
    for (i, name) in names("ephemeralContainers").into_iter().enumerate() {
        if name.is_empty() {
            return Err(invalid(
                format!("spec.ephemeralContainers[{i}].name"),
                "Required value".into(),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(invalid(
                format!("spec.ephemeralContainers[{i}].name"),
                format!("Duplicate value: \"{name}\""),
            ));
        }
    }
    let after = new["spec"]["ephemeralContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for was in old["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = was["name"].as_str().unwrap_or("");
        // The API server's two refusals: one gone, one changed.
        match after.iter().position(|c| c["name"] == was["name"]) {
            None => {
                return Err(invalid(
                    "spec.ephemeralContainers".into(),
                    format!(
                        "Forbidden: existing ephemeral containers \"{name}\" may not be removed"
                    ),
                ));
            }
            Some(i) if after[i] != *was => {
                return Err(invalid(
                    format!("spec.ephemeralContainers[{i}]"),
                    format!(
                        "Forbidden: existing ephemeral containers \"{name}\" may not be changed"
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A new object's metadata as the API server sets it: name, namespace, UID,
/// resourceVersion, creationTimestamp, and generation 1 for a custom resource.
fn stamp(object: &mut Value, (name, ns): (&str, &str), uid: &str, rv: &str, custom: bool) {
    let meta = object
        .as_object_mut()
        .map(|o| o.entry("metadata").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut);
    let Some(m) = meta else {
        return;
    };
    m.insert("name".into(), json!(name));
    if !ns.is_empty() {
        m.insert("namespace".into(), json!(ns));
    }
    m.insert("uid".into(), json!(uid));
    m.insert("resourceVersion".into(), json!(rv));
    m.insert("creationTimestamp".into(), json!(now_rfc3339()));
    if custom {
        m.insert("generation".into(), json!(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_line_names_its_type_before_the_object_and_is_encoded_once() {
        let key: Key = ("api/v1".into(), "pods".into(), "ns".into(), "p".into());
        let e = Event::new(3, "MODIFIED", key, json!({"metadata": {"name": "p"}}));
        let line = e.line();
        assert_eq!(
            &line[..],
            b"{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"p\"}}}\n"
        );
        assert_eq!(e.line().as_ptr(), line.as_ptr(), "the encoding is shared");
    }
}
