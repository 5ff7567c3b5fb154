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
