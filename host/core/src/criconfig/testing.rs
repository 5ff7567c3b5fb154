//! A node's facts and a static pod, for tests of configurations (the `testing` feature).

use std::path::Path;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{NodeContext, parse_resolv_conf};

/// Node `node-a` (192.168.1.2, 8 GiB, 3.5 CPUs allocatable) keeping its pods' files and
/// logs under `dir`, resolving through 1.1.1.1, with no cluster DNS.
pub fn node<C>(dir: &Path) -> NodeContext<C> {
    NodeContext {
        node_name: "node-a".into(),
        hostname: "node-a.local".into(),
        host_ip: "192.168.1.2".into(),
        pod_logs_dir: dir.join("logs"),
        pods_dir: dir.join("pods"),
        dns: parse_resolv_conf("nameserver 1.1.1.1\nsearch lan\noptions ndots:2\n"),
        cluster_dns: Vec::new(),
        cluster_domain: String::new(),
        hosts_file: dir.join("node-hosts"),
        memory_bytes: 8 << 30,
        allocatable: [
            ("cpu".to_string(), Quantity("3500m".into())),
            ("memory".to_string(), Quantity("8388608Ki".into())),
        ]
        .into(),
        pod_cgroups: None,
        cgroups: super::NodeCgroups::default(),
    }
}

/// The pod of `json` as a static pod of `node-a` from the file `p.yaml`.
pub fn static_pod(json: &str) -> k8s::Pod {
    let mut p: k8s::Pod = serde_json::from_str(json).expect("pod");
    crate::pod::make_static(&mut p, ("file", "p.yaml"), "node-a", None);
    p
}
