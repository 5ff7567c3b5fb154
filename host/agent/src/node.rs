//! The node: its facts (name, hostname, IP, capacity) read from the machine, and the
//! `v1.Node` object the admission plugins decide against and `GET /node` shows.

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::Path;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// What the agent knows of its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// The node's name (`nodeName`, or the hostname).
    pub name: String,
    /// The machine's hostname.
    pub hostname: String,
    /// The node's IP.
    pub ip: String,
    /// CPUs.
    pub cpus: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Bytes of the filesystem holding the agent's root directory.
    pub ephemeral_storage_bytes: u64,
    /// The most pods it runs (`maxPods`).
    pub max_pods: u32,
    /// Extra labels.
    pub labels: BTreeMap<String, String>,
    /// What is kept back from pods (kubeReserved plus systemReserved): allocatable is
    /// capacity less this.
    pub reserved: Reserved,
    /// The machine's huge pages: each size's resource (`hugepages-2Mi`) with the bytes
    /// of it the kernel holds — in capacity and allocatable as the kubelet reports them
    /// (`0` for a size with no pages).
    pub hugepages: Vec<(String, u64)>,
}

/// Resources kept back for the system and the agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    /// CPU, in millicores.
    pub cpu_millis: u64,
    /// Memory, in bytes.
    pub memory_bytes: u64,
    /// Ephemeral storage, in bytes.
    pub ephemeral_storage_bytes: u64,
    /// Process IDs (`pid`): kept from the pods' `kubepods` cgroup when `pods` is
    /// enforced.
    pub pids: u64,
}

impl Reserved {
    /// The sum of two reservations.
    pub fn plus(self, other: Reserved) -> Reserved {
        Reserved {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            ephemeral_storage_bytes: self
                .ephemeral_storage_bytes
                .saturating_add(other.ephemeral_storage_bytes),
            pids: self.pids.saturating_add(other.pids),
        }
    }
}

/// CPU as a quantity: whole cores as `2`, otherwise millicores (`1900m`).
fn cpu_quantity(millis: u64) -> Quantity {
    if millis.is_multiple_of(1000) {
        Quantity((millis / 1000).to_string())
    } else {
        Quantity(format!("{millis}m"))
    }
}

/// Bytes as the API's canonical binary quantity: `0`, `2Mi`, `1Gi`, else in `Ki` or
/// bytes.
fn binary_quantity(bytes: u64) -> Quantity {
    use wasmlet_core::quantity::{BINARY_SUFFIXES, binary_scaled};
    let (value, power) = binary_scaled(bytes);
    Quantity(format!("{value}{}", BINARY_SUFFIXES[power]))
}

/// The machine's hostname, lowercased.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_lowercase())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The address this machine would use to reach the outside (no packet is sent), or
/// 127.0.0.1 on a machine without a route.
pub fn host_ip() -> String {
    UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("10.255.255.255:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .ok()
        .filter(|ip| ip != "0.0.0.0")
        .unwrap_or_else(|| "127.0.0.1".into())
}

/// Size in bytes of the filesystem holding `path` (0 if it cannot be read).
pub fn filesystem_bytes(path: &Path) -> u64 {
    let mut p = path.to_path_buf();
    while !p.exists() {
        if !p.pop() {
            return 0;
        }
    }
    rustix::fs::statvfs(&p)
        .map(|s| s.f_blocks.saturating_mul(s.f_frsize))
        .unwrap_or(0)
}

impl NodeFacts {
    /// Reads the machine: `name` (or the hostname), its IP (or the detected one), CPUs,
    /// memory, and the size of the filesystem under `root_dir`.
    pub fn read(name: Option<&str>, ip: Option<&str>, root_dir: &Path, max_pods: u32) -> Self {
        let hostname = hostname();
        NodeFacts {
            name: name.map_or_else(|| hostname.clone(), str::to_lowercase),
            hostname,
            ip: ip.map_or_else(host_ip, str::to_owned),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
            memory_bytes: crate::criconfig::node_memory_bytes(),
            ephemeral_storage_bytes: filesystem_bytes(root_dir),
            max_pods,
            labels: BTreeMap::new(),
            reserved: Reserved::default(),
            hugepages: crate::criconfig::node_hugepages()
                .into_iter()
                .map(|(size, bytes)| (size.resource_name(), bytes))
                .collect(),
        }
    }

    /// What the node has, less `reserved`.
    fn resources(&self, reserved: &Reserved) -> BTreeMap<String, Quantity> {
        let ki =
            |bytes: u64, less: u64| Quantity(format!("{}Ki", bytes.saturating_sub(less) / 1024));
        BTreeMap::from([
            (
                "cpu".to_string(),
                cpu_quantity((self.cpus * 1000).saturating_sub(reserved.cpu_millis)),
            ),
            (
                "memory".to_string(),
                ki(self.memory_bytes, reserved.memory_bytes),
            ),
            (
                "ephemeral-storage".to_string(),
                ki(
                    self.ephemeral_storage_bytes,
                    reserved.ephemeral_storage_bytes,
                ),
            ),
            ("pods".to_string(), Quantity(self.max_pods.to_string())),
        ])
        .into_iter()
        .chain(
            self.hugepages
                .iter()
                .map(|(name, bytes)| (name.clone(), binary_quantity(*bytes))),
        )
        .collect()
    }

    /// Capacity: cpu, memory, ephemeral-storage, pods, each huge page size.
    pub fn capacity(&self) -> BTreeMap<String, Quantity> {
        self.resources(&Reserved::default())
    }

    /// Capacity less what is reserved.
    pub fn allocatable(&self) -> BTreeMap<String, Quantity> {
        self.resources(&self.reserved)
    }

    /// The node as a `v1.Node`: capacity, allocatable, the well-known labels, a Ready
    /// condition saying `ready` (with `message` when not).
    pub fn object(&self, ready: bool, message: &str, now: &str) -> k8s::Node {
        let mut labels = BTreeMap::from([
            // The kubelet's hostname is its --hostname-override when given: here the
            // node's name, which the API server dials first (Hostname address).
            ("kubernetes.io/hostname".to_string(), self.name.clone()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
            (
                "kubernetes.io/arch".to_string(),
                match std::env::consts::ARCH {
                    "x86_64" => "amd64",
                    "aarch64" => "arm64",
                    other => other,
                }
                .to_string(),
            ),
        ]);
        labels.extend(self.labels.clone());
        let capacity = self.capacity();
        let time = serde_json::from_value(serde_json::Value::String(now.to_owned())).ok();
        k8s::Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(labels),
                ..Default::default()
            },
            spec: Some(k8s::NodeSpec::default()),
            status: Some(k8s::NodeStatus {
                capacity: Some(capacity),
                allocatable: Some(self.allocatable()),
                addresses: Some(vec![
                    k8s::NodeAddress {
                        type_: "InternalIP".into(),
                        address: self.ip.clone(),
                    },
                    k8s::NodeAddress {
                        type_: "Hostname".into(),
                        address: self.name.clone(),
                    },
                ]),
                conditions: Some(vec![k8s::NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    reason: Some(
                        if ready {
                            "KubeletReady"
                        } else {
                            "KubeletNotReady"
                        }
                        .into(),
                    ),
                    message: Some(if ready {
                        "wasmlet is posting ready status".to_string()
                    } else {
                        message.to_owned()
                    }),
                    last_heartbeat_time: time.clone(),
                    last_transition_time: time,
                }]),
                ..Default::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_object_states_capacity_and_readiness() {
        let facts = NodeFacts {
            name: "node-a".into(),
            hostname: "vm".into(),
            ip: "10.0.0.5".into(),
            cpus: 2,
            memory_bytes: 4 << 30,
            ephemeral_storage_bytes: 100 << 30,
            max_pods: 110,
            labels: BTreeMap::new(),
            reserved: Reserved {
                cpu_millis: 100,
                memory_bytes: 512 << 20,
                ephemeral_storage_bytes: 0,
                pids: 0,
            },
            hugepages: vec![
                ("hugepages-1Gi".into(), 0),
                ("hugepages-2Mi".into(), 8 << 20),
            ],
        };
        let node = facts.object(false, "container runtime is down", "2026-11-22T10:00:00Z");
        let status = node.status.as_ref().expect("status");
        let cap = status.capacity.as_ref().expect("capacity");
        assert_eq!(cap["cpu"].0, "2");
        assert_eq!(cap["memory"].0, "4194304Ki");
        assert_eq!(cap["pods"].0, "110");
        let alloc = status.allocatable.as_ref().expect("allocatable");
        assert_eq!(alloc["cpu"].0, "1900m");
        assert_eq!(alloc["memory"].0, "3670016Ki");
        assert_eq!(alloc["ephemeral-storage"], cap["ephemeral-storage"]);
        // Each huge page size, none held as `0`, as the kubelet lists them.
        assert_eq!(
            (
                cap["hugepages-1Gi"].0.as_str(),
                cap["hugepages-2Mi"].0.as_str()
            ),
            ("0", "8Mi")
        );
        assert_eq!(alloc["hugepages-2Mi"], cap["hugepages-2Mi"]);
        let addresses = status.addresses.as_ref().expect("addresses");
        assert!(
            addresses
                .iter()
                .any(|a| a.type_ == "Hostname" && a.address == "node-a"),
            "the Hostname address is the node's name (the API server dials it), not the machine's: {addresses:?}"
        );
        assert_eq!(
            node.metadata.labels.as_ref().expect("labels")["kubernetes.io/hostname"],
            "node-a"
        );
        let ready = &status.conditions.as_ref().expect("conditions")[0];
        assert_eq!(
            (ready.status.as_str(), ready.message.as_deref()),
            ("False", Some("container runtime is down"))
        );
        let plugin_node = wasmlet_plugin_host::convert::node(&node).expect("converts");
        let _ = plugin_node;
        assert!(!host_ip().is_empty());
        assert!(filesystem_bytes(Path::new("/tmp/does/not/exist")) > 0);
    }
}
