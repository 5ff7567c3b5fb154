//! Shared by the plugin-host tests: the plugins built from `plugins/`, and builders for
//! the pods, nodes and usages they decide on. Each test binary uses part of it.
#![allow(dead_code)]

use wasmlet_plugin_host::*;

/// The shipped plugin `name`, built on first use.
pub fn plugin(name: &str) -> std::path::PathBuf {
    wasmlet_plugin_host::dev::shipped_plugin(name)
}

/// No resources at all.
pub fn resources() -> ResourceList {
    wasmlet_plugin_host::resources::empty()
}

/// Pod `web` in `default` with these containers.
pub fn pod(containers: Vec<Container>) -> Pod {
    Pod {
        uid: "uid-1".into(),
        name: "web".into(),
        namespace: "default".into(),
        labels: Vec::new(),
        annotations: Vec::new(),
        containers,
        init_containers: Vec::new(),
        overhead: resources(),
        node_selector: Vec::new(),
        required_node_affinity: Vec::new(),
        tolerations: Vec::new(),
        host_network: false,
        priority: 0,
        static_pod: false,
        source: "api".into(),
    }
}

/// Node `node-1` with no labels, taints or resources.
pub fn node() -> Node {
    Node {
        name: "node-1".into(),
        labels: Vec::new(),
        taints: Vec::new(),
        allocatable: resources(),
    }
}

/// The admission of `pod` to `node` carrying `load`; the pod's JSON is `{}`.
pub fn admission(pod: &Pod, node: &Node, load: &NodeLoad) -> std::sync::Arc<Admission> {
    Admission::new(pod.clone(), node.clone(), load.clone(), || "{}".to_owned())
}

/// A protocol by its Kubernetes name.
pub fn protocol(name: &str) -> Protocol {
    match name {
        "UDP" => Protocol::Udp,
        "SCTP" => Protocol::Sctp,
        _ => Protocol::Tcp,
    }
}

/// A node load holding these host ports: (address, protocol, port).
pub fn usage(held: &[(&str, &str, u16)]) -> NodeLoad {
    NodeLoad {
        usage: NodeUsage {
            requested: resources(),
            pod_count: held.len() as u32,
        },
        host_ports: held
            .iter()
            .map(|(ip, proto, port)| HostPortInUse {
                host_ip: (*ip).into(),
                protocol: protocol(proto),
                port: *port,
            })
            .collect(),
    }
}

/// A check of container `app` of pod `default/web` at 127.0.0.1.
pub fn probe_target(action: probe::Action, timeout_ms: u32) -> probe::Target {
    probe::Target {
        pod_namespace: "default".into(),
        pod_name: "web".into(),
        pod_uid: "uid-1".into(),
        container_name: "app".into(),
        pod_ip: "127.0.0.1".into(),
        kind: probe::ProbeKind::Liveness,
        action,
        timeout_ms,
    }
}

/// Network grants (`pod`, CIDRs), nothing else.
pub fn network(grants: &[&str]) -> probe::Grants {
    probe::Grants {
        exec: false,
        network: grants.iter().map(|g| g.parse().expect("grant")).collect(),
    }
}

/// The shipped probe handler `name`, with `grants`.
pub fn load_probe(engine: &PluginEngine, name: &str, grants: probe::Grants) -> probe::ProbeHandler {
    engine
        .load_probe(
            name,
            &plugin(name),
            std::collections::BTreeMap::new(),
            Limits::default(),
            grants,
        )
        .expect("load")
}

/// The process's resident anonymous memory, in KiB.
pub fn rss_anon_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("RssAnon in /proc/self/status")
}

/// The admission policy at `path`, loaded as `name` with no configuration.
pub fn load_admission(
    engine: &PluginEngine,
    name: &str,
    path: &std::path::Path,
    limits: Limits,
) -> AdmissionPlugin {
    engine
        .load_admission(name, path, std::collections::BTreeMap::new(), limits)
        .unwrap_or_else(|e| panic!("load {name} from {}: {e}", path.display()))
}
