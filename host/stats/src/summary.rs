//! The kubelet's stats Summary (`stats/v1alpha1`), what `GET /stats/summary` answers:
//! field names, nesting and omitted-when-unknown values as upstream's, so
//! metrics-server, `kubectl top` through it and other readers parse it unchanged.
//! Times are RFC 3339 strings, as `metav1.Time` prints.

use serde::{Deserialize, Serialize};

/// Node and pod stats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The node as a whole.
    pub node: NodeStats,
    /// Each pod.
    pub pods: Vec<PodStats>,
}

/// The node's stats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// System daemons tracked as containers (`kubelet`, `runtime`, `pods`, `misc`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    /// When collection started.
    pub start_time: String,
    /// CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// Network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// The root filesystem (`nodefs`: the kubelet's root directory's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    /// The runtime's image filesystem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    /// Processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
    /// Swap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// `pid_max` and the processes running.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RlimitStats {
    /// When read.
    pub time: String,
    /// The most PIDs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<i64>,
    /// Processes running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curproc: Option<i64>,
}

/// The runtime's filesystems.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    /// Where images are stored; `usedBytes` is what images take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

/// Processes of a pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// How many.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

/// One pod's stats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// Which pod.
    pub pod_ref: PodReference,
    /// When collection for the pod started.
    pub start_time: String,
    /// Its containers.
    pub containers: Vec<ContainerStats>,
    /// CPU of the pod cgroup (containers and overhead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the pod cgroup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The pod's network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// Its volumes.
    #[serde(rename = "volume", default, skip_serializing_if = "Vec::is_empty")]
    pub volume_stats: Vec<VolumeStats>,
    /// Writable layers, logs and emptyDirs together.
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
    /// Processes.
    #[serde(rename = "process_stats", skip_serializing_if = "Option::is_none")]
    pub process_stats: Option<ProcessStats>,
    /// Swap of the pod cgroup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// One container's stats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// The container's name in the pod.
    pub name: String,
    /// When it started.
    pub start_time: String,
    /// CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// Its writable layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// Its logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
    /// Swap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// A pod by name, namespace and UID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReference {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID.
    pub uid: String,
}

/// One interface's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    /// Interface name.
    pub name: String,
    /// Bytes received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    /// Receive errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    /// Bytes sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    /// Transmit errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// Network counters: the default interface's inline, all of them in `interfaces`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkStats {
    /// When read.
    pub time: String,
    /// The default interface (`eth0`).
    #[serde(flatten)]
    pub default: InterfaceStats,
    /// Every interface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// CPU use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When read.
    pub time: String,
    /// CPU over the last sample window, in billionths of a core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// CPU time since the start, in nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// Memory use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When read.
    pub time: String,
    /// The limit less the working set (omitted without a limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// All memory charged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// The working set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// Anonymous memory.
    #[serde(rename = "rssBytes", skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Minor page faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    /// Major page faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// Swap use: what is swapped out, and what more may be where there is a limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwapStats {
    /// When read.
    pub time: String,
    /// The limit less the usage (omitted without a limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_available_bytes: Option<u64>,
    /// Bytes swapped out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_usage_bytes: Option<u64>,
}

/// A volume's use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeStats {
    /// Its filesystem use.
    #[serde(flatten)]
    pub fs: FsStats,
    /// The volume's name in the pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// Filesystem use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    /// When read.
    pub time: String,
    /// Bytes still writable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Total bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Bytes this item uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Free inodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    /// Total inodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    /// Inodes this item uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

impl Summary {
    /// The summary with only CPU and memory (`?only_cpu_and_memory=true`): network,
    /// filesystems and volumes left out, as the kubelet answers it.
    pub fn cpu_and_memory(&self) -> Summary {
        let mut s = self.clone();
        s.node.network = None;
        s.node.fs = None;
        s.node.runtime = None;
        s.node.rlimit = None;
        for p in &mut s.pods {
            p.network = None;
            p.volume_stats.clear();
            p.ephemeral_storage = None;
            p.process_stats = None;
            for c in &mut p.containers {
                c.rootfs = None;
                c.logs = None;
            }
        }
        s
    }

    /// The pod `namespace/name`'s stats.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&PodStats> {
        self.pods
            .iter()
            .find(|p| p.pod_ref.namespace == namespace && p.pod_ref.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_are_upstreams() {
        let s = Summary {
            node: NodeStats {
                node_name: "n1".into(),
                start_time: "2026-11-23T10:00:00Z".into(),
                memory: Some(MemoryStats {
                    time: "t".into(),
                    working_set_bytes: Some(5),
                    rss_bytes: Some(1),
                    ..Default::default()
                }),
                network: Some(NetworkStats {
                    time: "t".into(),
                    default: InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: Some(9),
                        ..Default::default()
                    },
                    interfaces: Vec::new(),
                }),
                runtime: Some(RuntimeStats {
                    image_fs: Some(FsStats::default()),
                }),
                rlimit: Some(RlimitStats {
                    time: "t".into(),
                    maxpid: Some(10),
                    curproc: Some(3),
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "p".into(),
                    namespace: "ns".into(),
                    uid: "u".into(),
                },
                ephemeral_storage: Some(FsStats::default()),
                process_stats: Some(ProcessStats {
                    process_count: Some(2),
                }),
                volume_stats: vec![VolumeStats {
                    fs: FsStats {
                        used_bytes: Some(4),
                        ..Default::default()
                    },
                    name: "data".into(),
                }],
                ..Default::default()
            }],
        };
        let v = serde_json::to_value(&s).expect("json");
        assert_eq!(v["node"]["nodeName"], "n1");
        assert_eq!(v["node"]["memory"]["workingSetBytes"], 5);
        assert_eq!(v["node"]["memory"]["rssBytes"], 1);
        assert!(v["node"]["memory"].get("availableBytes").is_none());
        assert_eq!(v["node"]["network"]["name"], "eth0");
        assert_eq!(v["node"]["network"]["rxBytes"], 9);
        assert!(v["node"]["runtime"]["imageFs"].is_object());
        assert_eq!(v["node"]["rlimit"]["curproc"], 3);
        let pod = &v["pods"][0];
        assert_eq!(pod["podRef"]["uid"], "u");
        assert!(pod["ephemeral-storage"].is_object());
        assert_eq!(pod["process_stats"]["process_count"], 2);
        assert_eq!(pod["volume"][0]["name"], "data");
        assert_eq!(pod["volume"][0]["usedBytes"], 4);
        assert_eq!(pod["containers"], serde_json::json!([]));
        let back: Summary = serde_json::from_value(v).expect("parse back");
        assert_eq!(back, s);
        let small = s.cpu_and_memory();
        assert!(small.node.network.is_none() && small.pods[0].volume_stats.is_empty());
    }
}
