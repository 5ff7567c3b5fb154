//! What a node makes of a WasmletPlugin it is selected by: the admission link or probe
//! handler its spec describes, or why the node refuses it — a setting that is not
//! valid, a capability the node's `clusterPlugins.grants` does not give, a probe kind
//! the node's own configuration already checks. Decided before anything is fetched.

use std::path::Path;

use serde_json::Value;
use wasmlet_plugin_host::chain::LinkSpec;
use wasmlet_plugin_host::config::{
    AdmissionConfig, FailurePolicyConfig, InstancesConfig, ModeConfig, ProbeConfig, ProbeSpec,
    SourceConfig, SourceSpec,
};
use wasmlet_plugin_host::kinds::{PodSources, ProbeHandlers};
use wasmlet_plugin_host::probe::NetworkGrant;

use crate::config::Grants;
use crate::object::{Desired, Kind, SpecError};

/// What the node will load.
#[derive(Debug, Clone)]
pub enum Plan {
    /// A link of the admission chain, at `order` among the cluster's links.
    Admission(LinkSpec, i64),
    /// A probe handler.
    Probe(ProbeSpec),
    /// A pod source.
    Source(SourceSpec),
}

/// The pod source name the API server's pods carry (`kubernetes.io/config.source`).
const API_SOURCE: &str = "api";

/// Names the spec field a plugin-host setting comes from.
fn field(kind: &str) -> impl Fn(&str) -> String {
    let kind = kind.to_owned();
    move |f: &str| match f {
        "name" => "metadata.name".to_owned(),
        "memoryLimit" => "spec.memoryLimit".to_owned(),
        "config" => "spec.config".to_owned(),
        f if f.starts_with("network") || f.starts_with("urls") || f == "directory" => {
            format!("spec.capabilities.{f}")
        }
        "exec" => "spec.capabilities.exec".to_owned(),
        f => format!("spec.{kind}.{f}"),
    }
}

fn strings(value: &Value, field: &str) -> Result<Vec<String>, SpecError> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| SpecError::new(format!("{field}[{i}]"), "not a string"))
            })
            .collect(),
        _ => Err(SpecError::new(field, "not a list")),
    }
}

/// What an object's spec asks for besides its kind's settings.
struct Asked<'a> {
    network: Vec<String>,
    exec: bool,
    directory: Option<&'a str>,
    urls: Vec<String>,
    config: std::collections::BTreeMap<String, String>,
    memory_limit: Option<String>,
}

impl<'a> Asked<'a> {
    fn read(desired: &'a Desired) -> Result<Self, SpecError> {
        let caps = &desired.spec["capabilities"];
        Ok(Asked {
            network: strings(&caps["network"], "spec.capabilities.network")?,
            exec: caps["exec"].as_bool().unwrap_or(false),
            directory: caps["directory"].as_str().filter(|d| !d.is_empty()),
            urls: strings(&caps["urls"], "spec.capabilities.urls")?,
            config: desired.config()?,
            memory_limit: desired.text(&["memoryLimit"]),
        })
    }
}

/// What `desired` asks the node to load from the component at `path`, or why not.
pub fn plan(
    desired: &Desired,
    path: &Path,
    grants: &Grants,
    probes: &ProbeHandlers,
    sources: &PodSources,
) -> Result<Plan, SpecError> {
    let asked = Asked::read(desired)?;
    match desired.kind {
        Kind::Admission => admission(desired, path, asked),
        Kind::ProbeHandler => probe_handler(desired, path, asked, grants, probes),
        Kind::PodSource => pod_source(desired, path, asked, grants, sources),
    }
}

/// `spec.admission.<field>` of `desired`, one of `values` (the first when absent).
fn one_of<T: Copy>(desired: &Desired, field: &str, values: &[(&str, T)]) -> Result<T, SpecError> {
    match desired.text(&["admission", field]) {
        None => Ok(values[0].1),
        Some(text) => values
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                let names: Vec<&str> = values.iter().map(|(n, _)| *n).collect();
                SpecError::new(
                    format!("spec.admission.{field}"),
                    format!("{text:?} is neither {}", names.join(" nor ")),
                )
            }),
    }
}

fn admission(desired: &Desired, path: &Path, asked: Asked<'_>) -> Result<Plan, SpecError> {
    if !asked.network.is_empty()
        || asked.exec
        || asked.directory.is_some()
        || !asked.urls.is_empty()
    {
        return Err(SpecError::new(
            "spec.capabilities",
            "admission plugins are given none (they decide from the pod and node they are handed)",
        ));
    }
    let failure_policy = one_of(
        desired,
        "failurePolicy",
        &[
            ("Fail", FailurePolicyConfig::Fail),
            ("Ignore", FailurePolicyConfig::Ignore),
        ],
    )?;
    let instances = one_of(
        desired,
        "instances",
        &[
            ("Reused", InstancesConfig::Reused),
            ("PerCall", InstancesConfig::PerCall),
        ],
    )?;
    let mode = one_of(
        desired,
        "mode",
        &[
            ("Enforce", ModeConfig::Enforce),
            ("Monitor", ModeConfig::Monitor),
        ],
    )?;
    let order = match &desired.spec["admission"]["order"] {
        Value::Null => 0,
        v => v
            .as_i64()
            .ok_or_else(|| SpecError::new("spec.admission.order", "not an integer"))?,
    };
    let entry = AdmissionConfig {
        name: desired.name.clone(),
        file: Some(path.to_owned()),
        failure_policy,
        mode,
        timeout: desired.text(&["admission", "timeout"]),
        memory_limit: asked.memory_limit,
        instances,
        config: asked.config,
    };
    let link = entry.link_spec_at(Path::new("/"), &field("admission"))?;
    Ok(Plan::Admission(link, order))
}

fn probe_handler(
    desired: &Desired,
    path: &Path,
    asked: Asked<'_>,
    grants: &Grants,
    probes: &ProbeHandlers,
) -> Result<Plan, SpecError> {
    if asked.directory.is_some() || !asked.urls.is_empty() {
        return Err(SpecError::new(
            "spec.capabilities",
            "a probe handler may be given network and exec, not a directory or URLs",
        ));
    }
    let kinds = strings(
        &desired.spec["probeHandler"]["kinds"],
        "spec.probeHandler.kinds",
    )?;
    for kind in &kinds {
        if let Some(own) = probes.configured_for(kind) {
            return Err(SpecError::new(
                "spec.probeHandler.kinds",
                format!("this node checks {kind} probes with its own handler {own}"),
            ));
        }
        if let Some(other) = probes.cluster_for(kind)
            && wasmlet_plugin_host::Plugin::name(&*other) != desired.name
        {
            return Err(SpecError::new(
                "spec.probeHandler.kinds",
                format!(
                    "{kind} probes are already checked by WasmletPlugin {}",
                    wasmlet_plugin_host::Plugin::name(&*other)
                ),
            ));
        }
    }
    network_granted(&asked.network, grants)?;
    if asked.exec && !grants.exec {
        return Err(SpecError::new(
            "spec.capabilities.exec",
            "not granted by this node (clusterPlugins.grants.exec)",
        ));
    }
    let entry = ProbeConfig {
        name: desired.name.clone(),
        file: Some(path.to_owned()),
        kinds,
        network: asked.network,
        exec: asked.exec,
        memory_limit: asked.memory_limit,
        config: asked.config,
    };
    let spec = entry.spec_at(Path::new("/"), &field("probeHandler"))?;
    Ok(Plan::Probe(spec))
}

/// Whether every address range `asked` is inside one the node grants.
fn network_granted(asked: &[String], grants: &Grants) -> Result<(), SpecError> {
    let granted: Vec<NetworkGrant> = grants
        .network
        .iter()
        .filter_map(|g| g.parse().ok())
        .collect();
    for (i, text) in asked.iter().enumerate() {
        let field = || format!("spec.capabilities.network[{i}]");
        let parsed = text
            .parse::<NetworkGrant>()
            .map_err(|e| SpecError::new(field(), e.to_string()))?;
        if !granted.iter().any(|g| g.covers(&parsed)) {
            return Err(SpecError::new(
                field(),
                format!("{text} is not granted by this node (clusterPlugins.grants.network)"),
            ));
        }
    }
    Ok(())
}

fn pod_source(
    desired: &Desired,
    path: &Path,
    asked: Asked<'_>,
    grants: &Grants,
    sources: &PodSources,
) -> Result<Plan, SpecError> {
    if !asked.network.is_empty() || asked.exec {
        return Err(SpecError::new(
            "spec.capabilities",
            "a pod source may be given a directory and URLs, not network or exec",
        ));
    }
    if desired.name == API_SOURCE {
        return Err(SpecError::new(
            "metadata.name",
            format!("{API_SOURCE} names the API server's pods; a pod source needs another name"),
        ));
    }
    if sources.is_configured(&desired.name) {
        return Err(SpecError::new(
            "metadata.name",
            format!(
                "this node has a pod source of its own called {}; a WasmletPlugin cannot replace it",
                desired.name
            ),
        ));
    }
    if let Some(dir) = asked.directory {
        directory_granted(dir, grants)?;
    }
    for (i, url) in asked.urls.iter().enumerate() {
        if !grants.urls.iter().any(|g| url.starts_with(g.as_str())) {
            return Err(SpecError::new(
                format!("spec.capabilities.urls[{i}]"),
                format!("{url} is not granted by this node (clusterPlugins.grants.urls)"),
            ));
        }
    }
    let entry = SourceConfig {
        name: desired.name.clone(),
        file: Some(path.to_owned()),
        directory: asked.directory.map(Into::into),
        urls: asked.urls,
        period: desired.text(&["podSource", "period"]),
        timeout: desired.text(&["podSource", "timeout"]),
        memory_limit: asked.memory_limit,
        config: asked.config,
    };
    let spec = entry.spec_at(Path::new("/"), &field("podSource"))?;
    Ok(Plan::Source(spec))
}

/// Whether directory `dir` is plain (absolute, no `..`) and under one the node grants.
fn directory_granted(dir: &str, grants: &Grants) -> Result<(), SpecError> {
    let asked = Path::new(dir);
    let plain = asked.is_absolute()
        && asked
            .components()
            .all(|c| !matches!(c, std::path::Component::ParentDir));
    if !plain {
        return Err(SpecError::new(
            "spec.capabilities.directory",
            format!("{dir} is not an absolute path without .."),
        ));
    }
    if !grants.directories.iter().any(|g| asked.starts_with(g)) {
        return Err(SpecError::new(
            "spec.capabilities.directory",
            format!("{dir} is not granted by this node (clusterPlugins.grants.directories)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::desired;
    use serde_json::json;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// The node's own plugins: an exec probe handler and a pod source, neither of
    /// which loads (their files do not exist); what matters is that they are configured.
    async fn kinds() -> (ProbeHandlers, PodSources) {
        let engine = wasmlet_plugin_host::PluginEngine::new().expect("engine");
        let config: wasmlet_plugin_host::config::PluginsConfig = serde_json::from_value(json!({
            "probes": [{"name": "probe-exec", "file": "/nowhere/probe_exec.wasm", "kinds": ["exec"]}],
            "sources": [{"name": "node-src", "file": "/nowhere/node_src.wasm"}]
        }))
        .expect("config");
        let probes = ProbeHandlers::start(&engine, &config, false)
            .await
            .expect("probes");
        let sources = PodSources::start(&engine, &config, false)
            .await
            .expect("sources");
        (probes, sources)
    }

    fn object(spec: Value) -> Desired {
        let mut spec = spec;
        spec["digest"] = DIGEST.into();
        spec["source"] = json!({"configMap": {"name": "p", "key": "p.wasm"}});
        desired(&json!({"metadata": {"name": "policy", "generation": 1}, "spec": spec}))
            .expect("desired")
    }

    #[tokio::test]
    async fn admission_settings_become_a_link() {
        let (probes, sources) = kinds().await;
        let d = object(json!({"kind": "admission", "memoryLimit": "8Mi",
            "admission": {"order": 5, "failurePolicy": "Ignore", "timeout": "250ms", "instances": "PerCall"},
            "config": {"a": "b"}}));
        let Ok(Plan::Admission(link, order)) = plan(
            &d,
            Path::new("/store/x.wasm"),
            &Grants::default(),
            &probes,
            &sources,
        ) else {
            panic!("an admission link");
        };
        assert_eq!(order, 5);
        assert_eq!(link.path, Path::new("/store/x.wasm"));
        assert_eq!(link.limits.memory_bytes, 8 << 20);
        assert_eq!(link.limits.deadline, std::time::Duration::from_millis(250));
        assert_eq!(link.config.get("a").map(String::as_str), Some("b"));
    }

    #[tokio::test]
    async fn admission_settings_out_of_their_choices_are_named() {
        let (probes, sources) = kinds().await;
        let cases = [
            (
                json!({"failurePolicy": "Sometimes"}),
                "spec.admission.failurePolicy: \"Sometimes\" is neither Fail nor Ignore",
            ),
            (
                json!({"instances": "Pooled"}),
                "spec.admission.instances: \"Pooled\" is neither Reused nor PerCall",
            ),
            (
                json!({"order": "first"}),
                "spec.admission.order: not an integer",
            ),
        ];
        for (admission, want) in cases {
            let d = object(json!({"kind": "admission", "admission": admission}));
            let got = plan(
                &d,
                Path::new("/x.wasm"),
                &Grants::default(),
                &probes,
                &sources,
            );
            assert_eq!(got.err().map(|e| e.to_string()).as_deref(), Some(want));
        }
    }

    #[tokio::test]
    async fn what_the_node_does_not_grant_is_refused_by_field() {
        let (probes, sources) = kinds().await;
        let grants = Grants {
            network: vec!["pod".into(), "10.0.0.0/8".into()],
            directories: vec!["/etc/wasmlet/manifests".into()],
            urls: vec!["http://config.local/pods/".into()],
            ..Grants::default()
        };
        let path = Path::new("/store/x.wasm");
        let cases = [
            (
                json!({"kind": "admission", "capabilities": {"network": ["pod"]}}),
                "spec.capabilities: admission plugins are given none (they decide from the pod and node they are handed)",
            ),
            (
                json!({"kind": "admission", "admission": {"timeout": "soon"}}),
                "spec.admission.timeout: ",
            ),
            (
                json!({"kind": "admission", "memoryLimit": "1Gi"}),
                "spec.memoryLimit: 1Gi is more than the largest allowed, 256Mi",
            ),
            (
                json!({"kind": "probe-handler", "probeHandler": {"kinds": ["exec"]}}),
                "spec.probeHandler.kinds: this node checks exec probes with its own handler probe-exec",
            ),
            (
                json!({"kind": "probe-handler", "probeHandler": {"kinds": ["redis"]},
                    "capabilities": {"network": ["pod", "0.0.0.0/0"]}}),
                "spec.capabilities.network[1]: 0.0.0.0/0 is not granted by this node (clusterPlugins.grants.network)",
            ),
            (
                json!({"kind": "probe-handler", "probeHandler": {"kinds": ["redis"]},
                    "capabilities": {"exec": true}}),
                "spec.capabilities.exec: not granted by this node (clusterPlugins.grants.exec)",
            ),
            (
                json!({"kind": "probe-handler", "probeHandler": {"kinds": []}}),
                "spec.probeHandler.kinds: name at least one probe kind",
            ),
            (
                json!({"kind": "pod-source", "capabilities": {"exec": true}}),
                "spec.capabilities: a pod source may be given a directory and URLs, not network or exec",
            ),
            (
                json!({"kind": "pod-source", "capabilities": {"directory": "/etc/shadow-pods"}}),
                "spec.capabilities.directory: /etc/shadow-pods is not granted by this node (clusterPlugins.grants.directories)",
            ),
            (
                json!({"kind": "pod-source", "capabilities": {"directory": "/etc/wasmlet/manifests/../../root"}}),
                "spec.capabilities.directory: /etc/wasmlet/manifests/../../root is not an absolute path without ..",
            ),
            (
                json!({"kind": "pod-source", "capabilities": {"urls": ["http://config.local/pods/", "http://evil/"]}}),
                "spec.capabilities.urls[1]: http://evil/ is not granted by this node (clusterPlugins.grants.urls)",
            ),
            (
                json!({"kind": "pod-source", "podSource": {"period": "often"}}),
                "spec.podSource.period: ",
            ),
        ];
        for (spec, want) in cases {
            let got = plan(&object(spec.clone()), path, &grants, &probes, &sources)
                .expect_err("refused")
                .to_string();
            assert!(got.starts_with(want), "{spec}: {got}");
        }
        let ok = object(
            json!({"kind": "probe-handler", "probeHandler": {"kinds": ["redis"]},
                               "capabilities": {"network": ["pod", "10.88.0.0/16"]}}),
        );
        let Ok(Plan::Probe(spec)) = plan(&ok, path, &grants, &probes, &sources) else {
            panic!("a probe handler");
        };
        assert_eq!(spec.kinds, ["redis"]);
        assert_eq!(spec.grants.network.len(), 2);

        let source = object(json!({"kind": "pod-source", "podSource": {"period": "2s"},
            "capabilities": {"directory": "/etc/wasmlet/manifests/team-a",
                             "urls": ["http://config.local/pods/a/"]}}));
        let Ok(Plan::Source(spec)) = plan(&source, path, &grants, &probes, &sources) else {
            panic!("a pod source");
        };
        assert_eq!(spec.period, std::time::Duration::from_secs(2));
        assert_eq!(
            spec.grants.directory.as_deref(),
            Some(Path::new("/etc/wasmlet/manifests/team-a"))
        );
        assert_eq!(spec.grants.urls, ["http://config.local/pods/a/"]);
        // Names the node's own sources or the API server's pods have are not taken.
        for (name, want) in [
            (
                "node-src",
                "metadata.name: this node has a pod source of its own called node-src",
            ),
            ("api", "metadata.name: api names the API server's pods"),
        ] {
            let mut d = object(json!({"kind": "pod-source"}));
            d.name = name.into();
            let got = plan(&d, path, &grants, &probes, &sources)
                .expect_err("refused")
                .to_string();
            assert!(got.starts_with(want), "{name}: {got}");
        }
    }
}
