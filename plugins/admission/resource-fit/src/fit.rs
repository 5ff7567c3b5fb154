//! The resource-fit decision, written against the WIT types only (through `super::`) so
//! that the host can compile the very same file natively for comparison.

use super::{NodeUsage, Rejection, ResourceList, Verdict, resources};

/// A shortfall of one resource, worded as the kubelet words it.
fn short(name: &str, requested: u64, used: u64, capacity: u64) -> Verdict {
    Verdict::Reject(Rejection {
        reason: format!("OutOf{name}"),
        message: format!(
            "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, \
             capacity: {capacity}"
        ),
    })
}

/// An extended resource: a name with a domain that is not `kubernetes.io`
/// (`nvidia.com/gpu`). `hugepages-2Mi` and other native names are not.
fn is_extended(name: &str) -> bool {
    match name.split_once('/') {
        Some((domain, _)) => !domain.ends_with("kubernetes.io") && !name.starts_with("requests."),
        None => false,
    }
}

/// Whether a pod requesting `wanted` (its requests summed the kubelet's way) fits a
/// node with `capacity` allocatable that already carries `usage`. The kubelet's order:
/// pods, then cpu, memory, ephemeral-storage, then the other resources by name; the
/// first shortfall is the reason.
pub fn admit(wanted: &ResourceList, capacity: &ResourceList, usage: &NodeUsage) -> Verdict {
    let used = &usage.requested;
    let pods = u64::from(usage.pod_count);
    if pods + 1 > capacity.pods {
        return short("pods", 1, pods, capacity.pods);
    }

    // Extended resources the node does not advertise are left to their device plugin,
    // as the kubelet does: it drops them from the request before checking.
    let scalar = || {
        wanted.scalar.iter().filter(|(name, _)| {
            !is_extended(name) || capacity.scalar.iter().any(|(n, _)| n == name)
        })
    };
    let nothing = wanted.milli_cpu == 0
        && wanted.memory == 0
        && wanted.ephemeral_storage == 0
        && scalar().all(|(_, v)| *v == 0);
    if nothing {
        return Verdict::Admit;
    }

    let fixed = [
        ("cpu", wanted.milli_cpu, used.milli_cpu, capacity.milli_cpu),
        ("memory", wanted.memory, used.memory, capacity.memory),
        (
            "ephemeral-storage",
            wanted.ephemeral_storage,
            used.ephemeral_storage,
            capacity.ephemeral_storage,
        ),
    ];
    for (name, want, used, cap) in fixed {
        if want > 0 && want.saturating_add(used) > cap {
            return short(name, want, used, cap);
        }
    }
    for (name, want) in scalar() {
        let (used, cap) = (
            resources::scalar(used, name),
            resources::scalar(capacity, name),
        );
        if *want > 0 && want.saturating_add(used) > cap {
            return short(name, *want, used, cap);
        }
    }
    Verdict::Admit
}
