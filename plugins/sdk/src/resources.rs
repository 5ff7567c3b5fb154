//! Resource arithmetic the kubelet's way: what a pod requests, summed over its containers.
//!
//! One source for guest and host: plugins reach it as `wasmlet_plugin_sdk::resources`, and
//! the host (`wasmlet-plugin-host`) compiles this same file to sum the node's usage, so a
//! policy and the usage it is handed can never disagree. It therefore names only the WIT
//! types, through `super::`, and nothing else from either side.

use super::{Container, Pod, ResourceList};

/// A resource list with nothing in it.
pub fn empty() -> ResourceList {
    ResourceList {
        milli_cpu: 0,
        memory: 0,
        ephemeral_storage: 0,
        pods: 0,
        scalar: Vec::new(),
    }
}

/// The amount of scalar resource `name` in `list` (0 when absent).
pub fn scalar(list: &ResourceList, name: &str) -> u64 {
    list.scalar
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, v)| *v)
}

/// Combines `other` into `into` resource by resource with `op` (keeps `scalar` sorted).
fn combine(into: &mut ResourceList, other: &ResourceList, op: fn(u64, u64) -> u64) {
    into.milli_cpu = op(into.milli_cpu, other.milli_cpu);
    into.memory = op(into.memory, other.memory);
    into.ephemeral_storage = op(into.ephemeral_storage, other.ephemeral_storage);
    into.pods = op(into.pods, other.pods);
    for (name, value) in &other.scalar {
        match into.scalar.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(i) => into.scalar[i].1 = op(into.scalar[i].1, *value),
            Err(i) => into.scalar.insert(i, (name.clone(), op(0, *value))),
        }
    }
}

/// Adds `other` to `into`.
pub fn add(into: &mut ResourceList, other: &ResourceList) {
    combine(into, other, u64::saturating_add);
}

/// Raises every resource of `into` to at least its amount in `other`.
pub fn max_into(into: &mut ResourceList, other: &ResourceList) {
    combine(into, other, u64::max);
}

/// What `pod` requests of the node, as the kubelet counts it:
///
/// - the app containers' requests are summed;
/// - sidecars (init containers with `restartPolicy: Always`) run beside them, so their
///   requests are added to that sum;
/// - an ordinary init container runs alone, next to the sidecars started before it:
///   each needs its own request plus theirs;
/// - the pod needs the larger of the two, resource by resource, plus its overhead.
pub fn pod_requests(pod: &Pod) -> ResourceList {
    let mut running = empty();
    for c in &pod.containers {
        add(&mut running, &c.requests);
    }
    let mut sidecars = empty();
    let mut init_peak = empty();
    for c in &pod.init_containers {
        if c.restartable {
            add(&mut running, &c.requests);
            add(&mut sidecars, &c.requests);
            max_into(&mut init_peak, &sidecars);
        } else {
            let mut alone = sidecars.clone();
            add(&mut alone, &c.requests);
            max_into(&mut init_peak, &alone);
        }
    }
    max_into(&mut running, &init_peak);
    add(&mut running, &pod.overhead);
    running
}

/// The containers that run for the pod's whole life: app containers and sidecars.
pub fn long_running(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().filter(|c| c.restartable))
}
