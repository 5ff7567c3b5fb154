//! Shared by the plugin-host tests: the plugins built from `plugins/`, and builders for
//! the pods, nodes and usages they decide on. Each test binary uses part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use wasmlet_plugin_host::*;

/// Builds the plugins workspace once per test binary and returns the component's path.
pub fn plugin(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let plugins = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins");
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--release", "--quiet"])
            .current_dir(&plugins)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .status()
            .expect("run cargo for plugins/");
        assert!(
            status.success(),
            "building plugins/ failed (is the wasm32-wasip2 target installed?)"
        );
        plugins.join("target/wasm32-wasip2/release")
    });
    dir.join(format!("{}.wasm", name.replace('-', "_")))
}

/// No resources at all.
pub fn resources() -> ResourceList {
    ResourceList {
        milli_cpu: 0,
        memory: 0,
        ephemeral_storage: 0,
        pods: 0,
        scalar: Vec::new(),
    }
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

/// A node usage holding these host ports: (address, protocol, port).
pub fn usage(held: &[(&str, &str, u16)]) -> NodeUsage {
    NodeUsage {
        requested: resources(),
        pod_count: held.len() as u32,
        host_ports: held
            .iter()
            .map(|(ip, protocol, port)| HostPortInUse {
                host_ip: (*ip).into(),
                protocol: (*protocol).into(),
                port: *port,
            })
            .collect(),
    }
}
