//! The pod as the kubelet holds it when it hashes it: the v1 defaults the API machinery
//! applies when a manifest is decoded (v1.33's, in their order; for what a static pod
//! holds, 1.28's were the same) — [`apply`] — then what
//! the conversion to the internal type moves — [`to_internal`].
//! Volume kinds whose defaults are not written here (iSCSI, RBD, Azure disk, ScaleIO,
//! ephemeral claims) are not covered, nor a status with times.

use serde_json::{Map, Value, json};

use super::dump::Uncovered;

/// Applies the decode-time defaults to `pod`, v1 JSON.
pub fn apply(pod: &mut Value) -> Result<(), Uncovered> {
    let top = pod.as_object_mut().ok_or(Uncovered)?;
    let meta = top.entry("metadata").or_insert_with(|| json!({}));
    if meta.get("managedFields").is_some() {
        return Err(Uncovered);
    }
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        // The conversion drops the old init container annotations.
        for key in [
            "pod.beta.kubernetes.io/init-containers",
            "pod.alpha.kubernetes.io/init-containers",
            "pod.beta.kubernetes.io/init-container-statuses",
            "pod.alpha.kubernetes.io/init-container-statuses",
        ] {
            a.remove(key);
        }
    }
    let spec = top
        .entry("spec")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or(Uncovered)?;
    pod_defaults(spec);
    spec_defaults(spec);
    for v in list(spec, "volumes") {
        volume(v)?;
    }
    for kind in ["initContainers", "containers", "ephemeralContainers"] {
        for c in list(spec, kind) {
            container(c)?;
        }
    }
    // SetDefaults_ResourceList's rounding to milli-units is done as the lists are
    // printed (every resource list of a pod is rounded).
    Ok(())
}

/// What the conversion to the internal pod changes in `pod` (v1 JSON, defaulted): the
/// type meta dropped, the host namespace fields moved into the security context, the
/// deprecated service account name read.
pub fn to_internal(pod: &mut Value) -> Result<(), Uncovered> {
    let top = pod.as_object_mut().ok_or(Uncovered)?;
    top.remove("kind");
    top.remove("apiVersion");
    let spec = top
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or(Uncovered)?;
    spec_to_internal(spec)
}

/// The members of array `key` of `o`, if any.
fn list<'a>(o: &'a mut Map<String, Value>, key: &str) -> impl Iterator<Item = &'a mut Value> {
    o.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// A pointer field's default: set when it is nil.
fn set_if_nil(o: &mut Map<String, Value>, key: &str, value: Value) {
    if o.get(key).is_none_or(Value::is_null) {
        o.insert(key.to_owned(), value);
    }
}

/// A value field's default: set when it is its zero value.
fn set_default(o: &mut Map<String, Value>, key: &str, value: Value) {
    let empty = match o.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Number(n)) => n.as_i64() == Some(0),
        Some(_) => false,
    };
    if empty {
        o.insert(key.to_owned(), value);
    }
}

/// SetDefaults_Pod: requests from limits, service links, host ports on the host network.
fn pod_defaults(spec: &mut Map<String, Value>) {
    for kind in ["containers", "initContainers"] {
        for c in list(spec, kind) {
            let Some(r) = c.get_mut("resources").and_then(Value::as_object_mut) else {
                continue;
            };
            let Some(limits) = r.get("limits").and_then(Value::as_object).cloned() else {
                continue;
            };
            let requests = r.entry("requests").or_insert_with(|| json!({}));
            if requests.is_null() {
                *requests = json!({});
            }
            if let Some(req) = requests.as_object_mut() {
                for (k, v) in limits {
                    req.entry(k).or_insert(v);
                }
            }
        }
    }
    set_if_nil(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork") == Some(&json!(true)) {
        for kind in ["containers", "initContainers"] {
            for c in list(spec, kind) {
                for p in c
                    .get_mut("ports")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    if let Some(p) = p.as_object_mut() {
                        let port = p.get("containerPort").cloned().unwrap_or(json!(0));
                        set_default(p, "hostPort", port);
                    }
                }
            }
        }
    }
}

/// SetDefaults_PodSpec.
fn spec_defaults(spec: &mut Map<String, Value>) {
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "restartPolicy", json!("Always"));
    set_if_nil(spec, "securityContext", json!({}));
    set_if_nil(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
}

/// The default mode of a secret, configMap, downwardAPI or projected volume: 0644.
fn mode(o: &mut Value) {
    if let Some(o) = o.as_object_mut() {
        set_if_nil(o, "defaultMode", json!(0o644));
    }
}

fn field_refs(items: Option<&mut Value>) {
    for item in items.and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(f) = item.get_mut("fieldRef").and_then(Value::as_object_mut) {
            set_default(f, "apiVersion", json!("v1"));
        }
    }
}

const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
];

fn volume(v: &mut Value) -> Result<(), Uncovered> {
    let o = v.as_object_mut().ok_or(Uncovered)?;
    if VOLUME_SOURCES
        .iter()
        .all(|k| o.get(*k).is_none_or(Value::is_null))
    {
        o.insert("emptyDir".into(), json!({}));
    }
    for uncovered in ["iscsi", "rbd", "azureDisk", "scaleIO", "ephemeral"] {
        if o.get(uncovered).is_some_and(|s| !s.is_null()) {
            return Err(Uncovered);
        }
    }
    if let Some(h) = o.get_mut("hostPath").and_then(Value::as_object_mut) {
        set_if_nil(h, "type", json!(""));
    }
    for kind in ["secret", "configMap", "downwardAPI"] {
        if let Some(s) = o.get_mut(kind).filter(|s| !s.is_null()) {
            mode(s);
            field_refs(s.get_mut("items"));
        }
    }
    if let Some(p) = o.get_mut("projected").filter(|s| !s.is_null()) {
        mode(p);
        for source in p
            .get_mut("sources")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(d) = source.get_mut("downwardAPI") {
                field_refs(d.get_mut("items"));
            }
            if let Some(t) = source
                .get_mut("serviceAccountToken")
                .and_then(Value::as_object_mut)
            {
                set_if_nil(t, "expirationSeconds", json!(3600));
            }
        }
    }
    Ok(())
}

fn container(c: &mut Value) -> Result<(), Uncovered> {
    let o = c.as_object_mut().ok_or(Uncovered)?;
    let image = o.get("image").and_then(Value::as_str).unwrap_or("");
    let policy = if crate::pod::is_latest(image) {
        "Always"
    } else {
        "IfNotPresent"
    };
    set_default(o, "imagePullPolicy", json!(policy));
    set_default(o, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(o, "terminationMessagePolicy", json!("File"));
    for p in list(o, "ports") {
        if let Some(p) = p.as_object_mut() {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    for e in list(o, "env") {
        if let Some(f) = e
            .pointer_mut("/valueFrom/fieldRef")
            .and_then(Value::as_object_mut)
        {
            set_default(f, "apiVersion", json!("v1"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = o.get_mut(probe).and_then(Value::as_object_mut) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
            handler(p);
            if let Some(g) = p.get_mut("grpc").and_then(Value::as_object_mut) {
                set_if_nil(g, "service", json!(""));
            }
        }
    }
    if let Some(l) = o.get_mut("lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = l.get_mut(hook).and_then(Value::as_object_mut) {
                handler(h);
            }
        }
    }
    Ok(())
}

/// SetDefaults_HTTPGetAction on a handler's httpGet.
fn handler(h: &mut Map<String, Value>) {
    if let Some(g) = h.get_mut("httpGet").and_then(Value::as_object_mut) {
        set_default(g, "path", json!("/"));
        set_default(g, "scheme", json!("HTTP"));
    }
}

/// The v1 → internal conversion of the spec's host fields and service account.
fn spec_to_internal(spec: &mut Map<String, Value>) -> Result<(), Uncovered> {
    let moved: Vec<(&str, Option<Value>)> = [
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "shareProcessNamespace",
        "hostUsers",
    ]
    .into_iter()
    .map(|k| (k, spec.remove(k)))
    .collect();
    let sc = spec
        .get_mut("securityContext")
        .and_then(Value::as_object_mut)
        .ok_or(Uncovered)?;
    for (k, v) in moved {
        match v {
            Some(v) => sc.insert(k.to_owned(), v),
            None => sc.remove(k),
        };
    }
    let account = spec.remove("serviceAccount");
    if spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
        && let Some(a) = account
    {
        spec.insert("serviceAccountName".into(), a);
    }
    Ok(())
}
