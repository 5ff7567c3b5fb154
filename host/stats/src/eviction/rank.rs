//! Which pod goes first, as the kubelet ranks them, and the message it is given.
//!
//! - memory: pods using more memory than they request first, then lower priority,
//!   then by how far usage is above requests;
//! - disk bytes: the same with ephemeral storage (writable layers, logs, emptyDirs);
//! - inodes: lower priority, then more inodes used;
//! - pids: lower priority, then more processes.
//!
//! Pods the sample has no usage for go last. Critical pods (static, mirror, priority
//! at or above system-cluster-critical's 2000000000) are ranked but never evicted.

use std::cmp::Ordering;
use std::time::Duration;

use super::thresholds::{Observed, Signal, Threshold, format_quantity};
use crate::summary::{PodStats, Summary};

/// A pod as eviction sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodFacts {
    /// UID.
    pub uid: String,
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Never evicted: a static or mirror pod, or priority ≥ 2000000000.
    pub critical: bool,
    /// `terminationGracePeriodSeconds`.
    pub grace: Duration,
    /// Each container's requests.
    pub containers: Vec<Requests>,
}

/// A container's requests: amount and the quantity as written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Requests {
    /// The container's name.
    pub name: String,
    /// `requests.memory`.
    pub memory: Option<(u64, String)>,
    /// `requests.ephemeral-storage`.
    pub ephemeral_storage: Option<(u64, String)>,
}

/// The priority at and above which a pod is critical.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

impl PodFacts {
    fn memory_requests(&self) -> u64 {
        self.containers
            .iter()
            .filter_map(|c| c.memory.as_ref().map(|m| m.0))
            .sum()
    }

    fn storage_requests(&self) -> u64 {
        self.containers
            .iter()
            .filter_map(|c| c.ephemeral_storage.as_ref().map(|m| m.0))
            .sum()
    }
}

/// The pod's memory working set: its cgroup's, or its containers' together.
fn memory_usage(p: &PodStats) -> Option<u64> {
    p.memory
        .as_ref()
        .and_then(|m| m.working_set_bytes)
        .or_else(|| {
            let v: Vec<u64> = p
                .containers
                .iter()
                .filter_map(|c| c.memory.as_ref()?.working_set_bytes)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum())
        })
}

fn usage(signal: Signal, p: &PodStats) -> Option<u64> {
    match signal {
        Signal::MemoryAvailable => memory_usage(p),
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => {
            p.ephemeral_storage.as_ref().and_then(|e| e.used_bytes)
        }
        Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => {
            p.ephemeral_storage.as_ref().and_then(|e| e.inodes_used)
        }
        Signal::PidAvailable => p.process_stats.as_ref().and_then(|s| s.process_count),
    }
}

fn requests(signal: Signal, pod: &PodFacts) -> Option<u64> {
    match signal {
        Signal::MemoryAvailable => Some(pod.memory_requests()),
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => Some(pod.storage_requests()),
        _ => None,
    }
}

/// `pods` in the order the kubelet evicts them for `signal`.
pub fn rank<'a>(signal: Signal, pods: &'a [PodFacts], summary: &Summary) -> Vec<&'a PodFacts> {
    let stats = |p: &PodFacts| {
        summary
            .pods
            .iter()
            .find(|s| s.pod_ref.uid == p.uid)
            .and_then(|s| usage(signal, s))
    };
    let mut ranked: Vec<(&PodFacts, Option<u64>)> = pods.iter().map(|p| (p, stats(p))).collect();
    ranked.sort_by(|(a, ua), (b, ub)| {
        // Pods with usage known first.
        let known = ub.is_some().cmp(&ua.is_some());
        if known != Ordering::Equal {
            return known;
        }
        let (ua, ub) = (ua.unwrap_or(0), ub.unwrap_or(0));
        let by_requests = match (requests(signal, a), requests(signal, b)) {
            (Some(ra), Some(rb)) => {
                // Above requests first, then lower priority, then most above them.
                let above = (ub > rb).cmp(&(ua > ra));
                above
                    .then(a.priority.cmp(&b.priority))
                    .then((ub.saturating_sub(rb)).cmp(&ua.saturating_sub(ra)))
            }
            _ => a.priority.cmp(&b.priority).then(ub.cmp(&ua)),
        };
        by_requests.then_with(|| a.uid.cmp(&b.uid))
    });
    ranked.into_iter().map(|(p, _)| p).collect()
}

/// The kubelet's eviction message: the resource, the threshold and what was left, and
/// for memory and ephemeral storage each container using more than it requested.
pub fn message(t: &Threshold, o: &Observed, pod: &PodFacts, summary: &Summary) -> String {
    let resource = t.signal.resource();
    let bytes = matches!(
        t.signal,
        Signal::MemoryAvailable | Signal::NodeFsAvailable | Signal::ImageFsAvailable
    );
    let mut m = format!(
        "The node was low on resource: {resource}. Threshold quantity: {}, available: {}. ",
        t.quantity(o.capacity),
        format_quantity(o.available, bytes)
    );
    let Some(stats) = summary.pods.iter().find(|s| s.pod_ref.uid == pod.uid) else {
        return m;
    };
    for c in &stats.containers {
        let spec = pod.containers.iter().find(|r| r.name == c.name);
        let (used, request) = match t.signal {
            Signal::MemoryAvailable => (
                c.memory.as_ref().and_then(|m| m.working_set_bytes),
                spec.and_then(|s| s.memory.clone()),
            ),
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => {
                let rootfs = c.rootfs.as_ref().and_then(|f| f.used_bytes);
                let logs = c.logs.as_ref().and_then(|f| f.used_bytes);
                (
                    rootfs
                        .or(logs)
                        .map(|_| rootfs.unwrap_or(0) + logs.unwrap_or(0)),
                    spec.and_then(|s| s.ephemeral_storage.clone()),
                )
            }
            _ => (None, None),
        };
        let Some(used) = used else { continue };
        let (req, req_text) = request.unwrap_or((0, "0".to_owned()));
        if used > req {
            m.push_str(&format!(
                "Container {} was using {}, request is {req_text}, has larger consumption of {resource}. ",
                c.name,
                format_quantity(used, true)
            ));
        }
    }
    m
}

/// Whether the kubelet would never evict `pod`: static, mirror, or at
/// system-critical priority.
pub fn critical(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(wasmlet_core::pod::CONFIG_MIRROR_ANNOTATION));
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    wasmlet_core::pod::is_static(pod) || mirror || priority >= SYSTEM_CRITICAL_PRIORITY
}
