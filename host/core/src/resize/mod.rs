//! In-place pod resize (KEP-1287, beta and on by default in Kubernetes 1.33) as the
//! kubelet 1.33 decides it, without doing it:
//!
//! - [`Allocation`]: what the node granted each resizable container (app containers and
//!   sidecars), kept across restarts by the agent (the kubelet's allocation checkpoint).
//!   [`allocated_pod`] is the pod as it runs: its spec with the allocation's resources.
//! - [`decide`]: a resize asked for through the API (the spec's resources differing from
//!   the allocation) is allocated when it fits the node beside the other pods, else left
//!   pending — `Deferred` (it may fit later) or `Infeasible` (it never will).
//! - [`plan`]: what a running pod must do to reach its allocation — which containers get
//!   `UpdateContainerResources` (for each resource, decreases before increases) and
//!   which restart (`resizePolicy: RestartContainer`); for each resource the pod cgroup
//!   is set before the containers when it grows and after them when it shrinks.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use serde::{Deserialize, Serialize};

use crate::cgroups::values::{effective_requests, quantity};
use crate::pod;
use crate::quantity::parse_quantity;

mod plan;

pub use plan::{ContainerUpdate, Plan, Resource, Restart, plan, with_amounts};

/// The resources the node granted a pod's resizable containers, by container name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    /// Each app container's and sidecar's resources.
    pub containers: BTreeMap<String, k8s::ResourceRequirements>,
}

/// A container's CPU (millicores) and memory (bytes), requested and limited; 0 where
/// not given (the kubelet's `containerResources`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amounts {
    /// CPU request, millicores.
    pub cpu_request: u64,
    /// CPU limit, millicores.
    pub cpu_limit: u64,
    /// Memory request, bytes.
    pub memory_request: u64,
    /// Memory limit, bytes.
    pub memory_limit: u64,
}

type List = BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>;

impl Amounts {
    /// The amounts `r` asks for.
    pub fn of(r: Option<&k8s::ResourceRequirements>) -> Amounts {
        let requests = r.and_then(|r| r.requests.as_ref());
        let limits = r.and_then(|r| r.limits.as_ref());
        Amounts {
            cpu_request: quantity(requests, "cpu", 3),
            cpu_limit: quantity(limits, "cpu", 3),
            memory_request: quantity(requests, "memory", 0),
            memory_limit: quantity(limits, "memory", 0),
        }
    }
}

/// Whether two resource lists ask for the same (quantities compared by value: `1` and
/// `1000m` are the same CPU).
fn same_list(a: Option<&List>, b: Option<&List>) -> bool {
    let empty = List::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter().all(|(k, q)| {
            b.get(k).is_some_and(|other| {
                parse_quantity(&q.0, 3).ok() == parse_quantity(&other.0, 3).ok()
            })
        })
}

/// Whether two requirements are the same (the kubelet's semantic equality).
pub fn same(a: Option<&k8s::ResourceRequirements>, b: Option<&k8s::ResourceRequirements>) -> bool {
    same_list(
        a.and_then(|r| r.requests.as_ref()),
        b.and_then(|r| r.requests.as_ref()),
    ) && same_list(
        a.and_then(|r| r.limits.as_ref()),
        b.and_then(|r| r.limits.as_ref()),
    )
}

/// The resizable containers of `pod`: its app containers and sidecars.
fn resizable(pod: &k8s::Pod) -> impl Iterator<Item = &k8s::Container> {
    let sidecars = pod::init_containers(pod)
        .iter()
        .filter(|c| pod::is_restartable(c));
    pod::containers(pod).iter().chain(sidecars)
}

/// What `pod`'s spec asks for: the allocation it gets when admitted, and when a resize
/// of it is allocated.
pub fn allocation_of(pod: &k8s::Pod) -> Allocation {
    Allocation {
        containers: resizable(pod)
            .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
            .collect(),
    }
}

/// `pod` as it runs under `allocation`: its spec with the allocated resources where
/// they differ (`None`: the spec is the allocation).
pub fn allocated_pod(pod: &k8s::Pod, allocation: &Allocation) -> Option<k8s::Pod> {
    let differs = |c: &k8s::Container| {
        allocation
            .containers
            .get(&c.name)
            .filter(|a| !same(c.resources.as_ref(), Some(a)))
    };
    resizable(pod).find(|c| differs(c).is_some())?;
    let mut out = pod.clone();
    let spec = out.spec.as_mut()?;
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if let Some(a) = allocation.containers.get(&c.name) {
            c.resources = Some(a.clone());
        }
    }
    Some(out)
}

/// Why a resize waits (the `PodResizePending` condition's reason and message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// `Deferred` (it may fit once other pods go) or `Infeasible` (it never will here).
    pub reason: &'static str,
    /// The kubelet's words.
    pub message: String,
}

/// What to do with a pod whose spec may ask for other resources than allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The spec is the allocation: nothing pending.
    Unchanged,
    /// The resize fits: the spec becomes the allocation.
    Allocate,
    /// The resize waits; the pod runs on its allocation.
    Pending(Pending),
}

/// The node's allocatable CPU (millicores) and memory (bytes), and what the other active
/// pods' allocations request of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Room {
    /// Allocatable CPU, millicores.
    pub cpu: u64,
    /// Allocatable memory, bytes.
    pub memory: u64,
    /// The other pods' CPU requests, millicores.
    pub cpu_used: u64,
    /// The other pods' memory requests, bytes.
    pub memory_used: u64,
}

/// The kubelet's handlePodResourcesResize decision for `desired` (the spec as the API
/// has it) against its `allocation`.
pub fn decide(desired: &k8s::Pod, allocation: &Allocation, room: Room) -> Decision {
    if allocated_pod(desired, allocation).is_none() {
        return Decision::Unchanged;
    }
    if pod::is_static(desired) {
        return Decision::Pending(Pending {
            reason: "Infeasible",
            message: "In-place resize of static-pods is not supported".into(),
        });
    }
    match fits(desired, room) {
        Ok(()) => Decision::Allocate,
        Err(p) => Decision::Pending(p),
    }
}

/// Whether `pod`'s requests fit `room` (the kubelet's canResizePod): beyond the node's
/// allocatable is `Infeasible`, beyond what the other pods leave `Deferred`.
fn fits(pod: &k8s::Pod, room: Room) -> Result<(), Pending> {
    let (cpu, memory) = effective_requests(pod);
    if cpu > room.cpu || memory > room.memory {
        let message = if memory > room.memory {
            format!("memory, requested: {memory}, capacity: {}", room.memory)
        } else {
            format!("cpu, requested: {cpu}, capacity: {}", room.cpu)
        };
        return Err(Pending {
            reason: "Infeasible",
            message: format!("Node didn't have enough capacity: {message}"),
        });
    }
    let short = |name: &str, requested: u64, used: u64, capacity: u64| {
        (requested + used > capacity).then(|| Pending {
            reason: "Deferred",
            message: format!(
                "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
            ),
        })
    };
    match short("cpu", cpu, room.cpu_used, room.cpu)
        .or_else(|| short("memory", memory, room.memory_used, room.memory))
    {
        Some(p) => Err(p),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
