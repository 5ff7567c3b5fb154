//! What the tests and benchmarks of the agent and of the crates built on it share (the
//! `testing` feature): a simulated node's facts, an agent's options on it, a checker
//! that passes every probe.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use wasmlet_plugin_host::probe::{ContainerExec, Outcome, Target};

use crate::agent::AgentOptions;
use crate::node::NodeFacts;
use crate::prober::Checker;

/// A 4-CPU, 8 GiB node called `name` at 192.168.50.10, 110 pods at most.
pub fn node_facts(name: &str) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        hostname: name.into(),
        ip: "192.168.50.10".into(),
        cpus: 4,
        memory_bytes: 8 << 30,
        ephemeral_storage_bytes: 100 << 30,
        max_pods: 110,
        labels: Default::default(),
        reserved: Default::default(),
        hugepages: Vec::new(),
    }
}

/// An agent for `node` keeping its state in `root` (its pod logs in `root/logs`),
/// taking pods from the `file` source, relisting every second; no cgroups, events,
/// volumes, services or devices.
pub fn options(node: NodeFacts, root: &Path) -> AgentOptions {
    AgentOptions {
        node_cgroups: Default::default(),
        node,
        pod_logs_dir: root.join("logs"),
        root_dir: root.to_owned(),
        resolv_conf: "/etc/resolv.conf".into(),
        sync_frequency: Duration::from_secs(60),
        relist_period: Duration::from_secs(1),
        sources: vec!["file".into()],
        pod_cgroups: None,
        events: None,
        volumes: None,
        services: None,
        cluster_dns: Default::default(),
        start_parallelism: 0,
        devices: None,
    }
}

/// A probe checker for pods without probes: every check passes.
pub struct NoProbes;

impl Checker for NoProbes {
    fn check<'a>(
        &'a self,
        _: &'a str,
        _: &'a Target,
        _: Option<Arc<dyn ContainerExec>>,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, crate::prober::CheckError>> + Send + 'a>> {
        Box::pin(async { Ok(Outcome::Success(String::new())) })
    }
}
