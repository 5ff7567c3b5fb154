//! What a running pod does to reach its allocation (the kubelet 1.33's
//! computePodResizeAction): per running resizable container, the allocated amounts
//! against those it was last given (its "actuated" resources).

use k8s_openapi::api::core::v1 as k8s;

use super::Amounts;
use crate::cgroups::tree::Qos;
use crate::cgroups::values::pod_resources;
use crate::pod::{self, Place};
use crate::runtime::{PodRuntime, State};

/// A resource resized in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// CPU: shares and quota.
    Cpu,
    /// Memory: the limit.
    Memory,
}

/// One `UpdateContainerResources` of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUpdate {
    /// The container's name.
    pub name: String,
    /// Its runtime id.
    pub id: String,
    /// The amounts it is to have (of the resource updated; the other resource keeps
    /// what it has at the time of the call).
    pub desired: Amounts,
}

/// A container restarted for its resize (`resizePolicy: RestartContainer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restart {
    /// Where it is in the spec.
    pub which: Place,
    /// Its runtime id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The kubelet's words: `Container c resize requires restart`.
    pub message: String,
}

/// What a pod's resize does, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Memory updates, decreases first.
    pub memory: Vec<ContainerUpdate>,
    /// CPU updates, decreases first.
    pub cpu: Vec<ContainerUpdate>,
    /// Containers restarted instead.
    pub restart: Vec<Restart>,
    /// The pod's cgroup is to be set (a container is updated or restarted).
    pub update_pod: bool,
    /// The pod's memory limit grows (or stays): its cgroup's memory is set before the
    /// containers'; when it shrinks, after them (a parent below its child is refused).
    pub memory_first: bool,
    /// The same for the pod's CPU quota.
    pub cpu_first: bool,
}

impl Plan {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        !self.update_pod
    }
}

/// The restart policy of `c` for `resource` (`NotRequired` unless said).
fn restarts_for(c: &k8s::Container, resource: &str) -> bool {
    c.resize_policy
        .iter()
        .flatten()
        .find(|p| p.resource_name == resource)
        .is_some_and(|p| p.restart_policy == "RestartContainer")
}

/// Adds `update` to `list`: after the others when the amount grows, before them when
/// it shrinks (decreases free room before increases take it).
fn order(list: &mut Vec<ContainerUpdate>, update: ContainerUpdate, grows: bool) {
    if grows {
        list.push(update);
    } else {
        list.insert(0, update);
    }
}

/// The resize of `pod` (its allocated spec) on `rt`; `actuated` gives what each
/// container (by name) was last given. Containers not running are sized when they
/// start and need nothing here.
pub fn plan(pod: &k8s::Pod, rt: &PodRuntime, actuated: &dyn Fn(&str) -> Option<Amounts>) -> Plan {
    let mut plan = Plan::default();
    // What the changed containers run with now, for the pod cgroup's order.
    let mut given: Vec<(&str, Amounts)> = Vec::new();
    for (which, c) in pod::apps_and_sidecars(pod) {
        let Some(status) = rt.latest(&c.name).filter(|s| s.state == State::Running) else {
            continue;
        };
        let desired = Amounts::of(c.resources.as_ref());
        let current = actuated(&c.name).unwrap_or_default();
        if desired == current {
            continue;
        }
        plan.update_pod = true;
        given.push((&c.name, current));
        let cpu_changed =
            desired.cpu_request != current.cpu_request || desired.cpu_limit != current.cpu_limit;
        let memory_changed = desired.memory_request != current.memory_request
            || desired.memory_limit != current.memory_limit;
        if (cpu_changed && restarts_for(c, "cpu")) || (memory_changed && restarts_for(c, "memory"))
        {
            plan.restart.push(Restart {
                which,
                id: status.id.clone(),
                name: c.name.clone(),
                message: format!("Container {} resize requires restart", c.name),
            });
            continue;
        }
        let update = || ContainerUpdate {
            name: c.name.clone(),
            id: status.id.clone(),
            desired,
        };
        if memory_changed {
            let grows = if desired.memory_limit != current.memory_limit {
                desired.memory_limit > current.memory_limit
            } else {
                desired.memory_request > current.memory_request
            };
            order(&mut plan.memory, update(), grows);
        }
        if cpu_changed {
            let grows = if desired.cpu_limit != current.cpu_limit {
                desired.cpu_limit > current.cpu_limit
            } else {
                desired.cpu_request > current.cpu_request
            };
            order(&mut plan.cpu, update(), grows);
        }
    }
    if !plan.update_pod {
        return plan;
    }
    let mut running = pod.clone();
    for (name, amounts) in given {
        set_resources(&mut running, name, amounts);
    }
    let qos = Qos::from_class(crate::status::qos_class(pod));
    let (before, after) = (pod_resources(&running, qos), pod_resources(pod, qos));
    let no_less = |b: Option<u64>, a: Option<u64>| a.is_none_or(|a| b.is_some_and(|b| a >= b));
    plan.memory_first = no_less(before.memory_limit, after.memory_limit);
    let quota = |q: Option<i64>| q.and_then(|q| u64::try_from(q).ok());
    plan.cpu_first = no_less(quota(before.cpu_quota), quota(after.cpu_quota));
    plan
}

/// `pod` with container `name`'s resources set to `amounts` (what it runs with).
fn set_resources(pod: &mut k8s::Pod, name: &str, amounts: Amounts) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let all = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for c in all.filter(|c| c.name == name) {
        *c = with_amounts(c, amounts);
    }
}

/// An amount as a quantity: CPU in millicores, memory in bytes.
fn quantity(
    resource: &str,
    amount: u64,
) -> k8s_openapi::apimachinery::pkg::api::resource::Quantity {
    k8s_openapi::apimachinery::pkg::api::resource::Quantity(match resource {
        "cpu" => format!("{amount}m"),
        _ => amount.to_string(),
    })
}

/// `c` with `amounts` as its resources (amounts of 0 left out).
pub fn with_amounts(c: &k8s::Container, amounts: Amounts) -> k8s::Container {
    let list = |pairs: [(&str, u64); 2]| {
        let list: std::collections::BTreeMap<_, _> = pairs
            .into_iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| (k.to_owned(), quantity(k, v)))
            .collect();
        (!list.is_empty()).then_some(list)
    };
    k8s::Container {
        resources: Some(k8s::ResourceRequirements {
            requests: list([
                ("cpu", amounts.cpu_request),
                ("memory", amounts.memory_request),
            ]),
            limits: list([("cpu", amounts.cpu_limit), ("memory", amounts.memory_limit)]),
            ..Default::default()
        }),
        ..c.clone()
    }
}
