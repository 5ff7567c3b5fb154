//! The container's environment: `value`, `$(VAR)` expansion, `fieldRef`,
//! `resourceFieldRef` (a limit the container does not set reads the node's
//! allocatable), ConfigMap and Secret keys, `envFrom` — the kubelet's rules and words.

use std::collections::BTreeMap;

use crate::quantity::parse_quantity;
use k8s_openapi::api::core::v1 as k8s;

use super::{ConfigError, NodeContext};
use crate::pod;

/// Expands `$(VAR)` references from `env` the Kubernetes way: `$$` escapes, unknown
/// references stay as written.
pub fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    crate::expand::expand_with(text, |name| env.get(name).cloned())
}

/// The value of a `fieldRef` (`None`: a path the kubelet does not resolve).
pub fn field_ref<C>(
    pod: &k8s::Pod,
    path: &str,
    pod_ip: &str,
    ctx: &NodeContext<C>,
) -> Option<String> {
    let m = &pod.metadata;
    let map_key = |prefix: &str, map: &Option<BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        // A label or annotation that is not there reads as empty, as with the kubelet.
        Some(
            map.as_ref()
                .and_then(|m| m.get(key).cloned())
                .unwrap_or_default(),
        )
    };
    Some(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => pod::uid(pod).to_owned(),
        "spec.nodeName" => ctx.node_name.clone(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => ctx.host_ip.clone(),
        "status.podIP" | "status.podIPs" => {
            if pod::host_network(pod) {
                ctx.host_ip.clone()
            } else {
                pod_ip.to_owned()
            }
        }
        _ => {
            return map_key("metadata.labels['", &m.labels)
                .or_else(|| map_key("metadata.annotations['", &m.annotations));
        }
    })
}

/// The value of a `resourceFieldRef`, in its divisor's units.
pub fn resource_ref<C>(
    c: &k8s::Container,
    r: &k8s::ResourceFieldSelector,
    field: &str,
    ctx: &NodeContext<C>,
) -> Result<String, ConfigError> {
    let res = c.resources.clone().unwrap_or_default();
    let (which, name) = r
        .resource
        .split_once('.')
        .ok_or_else(|| ConfigError::new(format!("{field}: unsupported resource {}", r.resource)))?;
    let list = if which == "limits" {
        res.limits
    } else {
        res.requests
    };
    // A limit the container does not set is the node's allocatable amount.
    let q = list.and_then(|l| l.get(name).cloned()).or_else(|| {
        (which == "limits")
            .then(|| ctx.allocatable.get(name).cloned())
            .flatten()
    });
    let (scale, divisor_default) = if name == "cpu" { (3, 1000) } else { (0, 1) };
    let value = q
        .and_then(|q| parse_quantity(&q.0, scale).ok())
        .unwrap_or(0);
    // The API server sends a divisor the pod left out as `"0"` (a Quantity, not a
    // pointer); the kubelet reads zero, like absent, as `1`. A non-zero divisor below
    // the unit was already rounded up to it.
    let divisor = match &r.divisor {
        Some(d) => parse_quantity(&d.0, scale)
            .map_err(|e| ConfigError::new(format!("{field}.divisor: {e}")))?,
        None => 0,
    };
    let divisor = if divisor == 0 {
        divisor_default
    } else {
        divisor
    };
    Ok(value.div_ceil(divisor).to_string())
}

/// ConfigMaps and Secrets a pod's environment refers to, read before its containers
/// are made (`None`: it does not exist). Values are text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvData {
    /// ConfigMaps by name.
    pub config_maps: BTreeMap<String, Option<BTreeMap<String, String>>>,
    /// Secrets by name.
    pub secrets: BTreeMap<String, Option<BTreeMap<String, String>>>,
    /// The Services' variables (`KUBERNETES_SERVICE_HOST` …) the pod gets: below the
    /// container's own variables, which may refer to them.
    pub services: Vec<(String, String)>,
    /// Why the Services could not be read (containers wait, as with the kubelet).
    pub services_error: Option<String>,
}

impl EnvData {
    /// The ConfigMaps (`false`) and Secrets (`true`) `c`'s environment names.
    pub fn wanted(c: &k8s::Container) -> Vec<(bool, String)> {
        let mut out = Vec::new();
        for from in c.env_from.iter().flatten() {
            if let Some(r) = &from.config_map_ref {
                out.push((false, r.name.clone()));
            }
            if let Some(r) = &from.secret_ref {
                out.push((true, r.name.clone()));
            }
        }
        for e in c.env.iter().flatten() {
            if let Some(from) = &e.value_from {
                if let Some(r) = &from.config_map_key_ref {
                    out.push((false, r.name.clone()));
                }
                if let Some(r) = &from.secret_key_ref {
                    out.push((true, r.name.clone()));
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The data of a ConfigMap (`secret` false) or Secret, or the kubelet's error when
    /// it is missing.
    fn get(&self, secret: bool, name: &str) -> Result<&BTreeMap<String, String>, ConfigError> {
        let map = if secret {
            &self.secrets
        } else {
            &self.config_maps
        };
        map.get(name).and_then(Option::as_ref).ok_or_else(|| {
            ConfigError::new(format!(
                "{} \"{name}\" not found",
                if secret { "secret" } else { "configmap" }
            ))
        })
    }
}

/// The container's environment, in order, with references resolved.
pub(super) fn environment<C>(
    pod: &k8s::Pod,
    c: &k8s::Container,
    pod_ip: &str,
    ctx: &NodeContext<C>,
    refs: &EnvData,
) -> Result<Vec<(String, String)>, ConfigError> {
    if let Some(e) = &refs.services_error {
        return Err(ConfigError::new(e.clone()));
    }
    let mut env: Vec<(String, String)> = Vec::new();
    let mut known: BTreeMap<String, String> = refs.services.iter().cloned().collect();
    for from in c.env_from.iter().flatten() {
        let (secret, name, optional) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), _) => (false, &r.name, r.optional.unwrap_or(false)),
            (None, Some(r)) => (true, &r.name, r.optional.unwrap_or(false)),
            (None, None) => continue,
        };
        let data = match refs.get(secret, name) {
            Ok(d) => d,
            Err(_) if optional => continue,
            Err(e) => return Err(e),
        };
        let prefix = from.prefix.as_deref().unwrap_or("");
        for (k, v) in data {
            let key = format!("{prefix}{k}");
            known.insert(key.clone(), v.clone());
            env.retain(|(n, _)| n != &key);
            env.push((key, v.clone()));
        }
    }
    for (i, e) in c.env.iter().flatten().enumerate() {
        let field = format!("env[{i}] ({})", e.name);
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => expand(v, &known),
            (None, Some(from)) => match value_from(pod, c, from, (&field, pod_ip), ctx, refs)? {
                Some(v) => v,
                // An optional reference to what is not there: no variable.
                None => continue,
            },
            (None, None) => String::new(),
        };
        known.insert(e.name.clone(), value.clone());
        env.retain(|(k, _)| k != &e.name);
        env.push((e.name.clone(), value));
    }
    for (k, v) in &refs.services {
        if !env.iter().any(|(n, _)| n == k) {
            env.push((k.clone(), v.clone()));
        }
    }
    Ok(env)
}

/// An env var's `valueFrom`: a field of the pod, a resource of the container, or a key
/// of a ConfigMap or Secret (`None`: an optional one that is not there). `field` names
/// the variable in errors.
fn value_from<C>(
    pod: &k8s::Pod,
    c: &k8s::Container,
    from: &k8s::EnvVarSource,
    (field, pod_ip): (&str, &str),
    ctx: &NodeContext<C>,
    refs: &EnvData,
) -> Result<Option<String>, ConfigError> {
    if let Some(f) = &from.field_ref {
        return field_ref(pod, &f.field_path, pod_ip, ctx)
            .map(Some)
            .ok_or_else(|| {
                ConfigError::new(format!("{field}: unsupported fieldRef {}", f.field_path))
            });
    }
    if let Some(r) = &from.resource_field_ref {
        return resource_ref(c, r, field, ctx).map(Some);
    }
    let key_ref = from
        .config_map_key_ref
        .as_ref()
        .map(|r| (false, &r.name, &r.key, r.optional.unwrap_or(false)))
        .or_else(|| {
            from.secret_key_ref
                .as_ref()
                .map(|r| (true, &r.name, &r.key, r.optional.unwrap_or(false)))
        });
    let Some((secret, name, key, optional)) = key_ref else {
        return Ok(Some(String::new()));
    };
    match refs.get(secret, name).map(|d| d.get(key).cloned()) {
        Ok(Some(v)) => Ok(Some(v)),
        _ if optional => Ok(None),
        Err(e) => Err(e),
        // The kubelet's words.
        Ok(None) => {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            Err(ConfigError::new(format!(
                "couldn't find key {key} in {} {namespace}/{name}",
                if secret { "Secret" } else { "ConfigMap" }
            )))
        }
    }
}
