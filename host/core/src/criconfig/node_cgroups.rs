//! What the kubelet adds to each container's Linux resources for the node's cgroups: a
//! huge page limit for every size the machine has (0 unless the container asks for
//! that size), and on cgroup v2 the unified files — `memory.oom.group` (the whole
//! container goes on an OOM kill, unless `singleProcessOOMKill`) and `memory.swap.max`
//! (`memorySwap.swapBehavior`: none, or the container's share of the swap).

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_cri_api::proto;

use crate::cgroups::hugetlb::{self, PageSize};
use crate::cgroups::values::quantity;

/// `memorySwap.swapBehavior`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SwapBehavior {
    /// `NoSwap` (the default): containers get no swap.
    #[default]
    NoSwap,
    /// `LimitedSwap`: a Burstable container whose memory request is below its limit
    /// gets swap in proportion to its request of the node's memory.
    LimitedSwap,
}

/// The node's cgroup facts containers are configured by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeCgroups {
    /// The machine's huge page sizes.
    pub hugepage_sizes: Vec<PageSize>,
    /// Whether the node runs the unified hierarchy (cgroup v2).
    pub v2: bool,
    /// `singleProcessOOMKill`: an OOM kill takes one process, not the whole container
    /// (always so on v1).
    pub single_process_oom_kill: bool,
    /// Whether the kernel limits swap per cgroup (`memory.swap.max` beside the agent's
    /// own cgroup on v2, `memory.memsw.limit_in_bytes` on v1): swap is set only then.
    pub swap_controller: bool,
    /// `memorySwap.swapBehavior`.
    pub swap: SwapBehavior,
    /// The node's memory and swap in bytes (for LimitedSwap).
    pub memory_bytes: u64,
    /// The machine's swap in bytes.
    pub swap_bytes: u64,
}

impl NodeCgroups {
    /// Adds the huge page limits, the OOM group and the swap limit to `lcr`, made for
    /// container `c` of `pod`.
    pub fn apply(
        &self,
        pod: &k8s::Pod,
        c: &k8s::Container,
        lcr: &mut proto::LinuxContainerResources,
    ) {
        let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
        lcr.hugepage_limits = hugetlb::limits(&self.hugepage_sizes, limits)
            .into_iter()
            .map(|(page_size, limit)| proto::HugepageLimit { page_size, limit })
            .collect();
        if self.v2 && !self.single_process_oom_kill {
            lcr.unified.insert("memory.oom.group".into(), "1".into());
        }
        if !self.swap_controller {
            return;
        }
        match self.swap_for(pod, c) {
            // v1 has no swap of its own to set: memory and swap together as the memory.
            Some(_) if !self.v2 => lcr.memory_swap_limit_in_bytes = lcr.memory_limit_in_bytes,
            Some(bytes) => {
                lcr.unified
                    .insert("memory.swap.max".into(), bytes.to_string());
            }
            None => {}
        }
    }

    /// The swap container `c` gets: `Some(0)` under NoSwap (and for what LimitedSwap
    /// does not cover), its share under LimitedSwap.
    fn swap_for(&self, pod: &k8s::Pod, c: &k8s::Container) -> Option<u64> {
        if self.swap == SwapBehavior::NoSwap || !self.v2 {
            return Some(0);
        }
        let r = c.resources.as_ref();
        let request = quantity(r.and_then(|r| r.requests.as_ref()), "memory", 0);
        let limit = quantity(r.and_then(|r| r.limits.as_ref()), "memory", 0);
        let burstable = crate::status::qos_class(pod) == "Burstable";
        if !burstable || (request == 0 && limit == 0) || request == limit || critical(pod) {
            return Some(0);
        }
        let share = u128::from(request) * u128::from(self.swap_bytes)
            / u128::from(self.memory_bytes.max(1));
        Some(u64::try_from(share).unwrap_or(u64::MAX))
    }
}

/// A critical pod (the kubelet's `IsCriticalPod`: a static or mirror pod, or a priority
/// at or above system-cluster-critical's): no swap under LimitedSwap.
fn critical(pod: &k8s::Pod) -> bool {
    const SYSTEM_CRITICAL: i32 = 2_000_000_000;
    crate::pod::is_static(pod)
        || crate::pod::is_mirror(pod)
        || pod
            .spec
            .as_ref()
            .and_then(|s| s.priority)
            .is_some_and(|p| p >= SYSTEM_CRITICAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> k8s::Pod {
        serde_yaml_ng::from_str(yaml).expect("pod")
    }

    fn node(v2: bool) -> NodeCgroups {
        NodeCgroups {
            hugepage_sizes: hugetlb::page_sizes(["hugepages-2048kB", "hugepages-1048576kB"]),
            v2,
            single_process_oom_kill: !v2,
            swap_controller: true,
            swap: SwapBehavior::NoSwap,
            memory_bytes: 4 << 30,
            swap_bytes: 1 << 30,
        }
    }

    fn resources(n: &NodeCgroups, p: &k8s::Pod) -> proto::LinuxContainerResources {
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let mut lcr = proto::LinuxContainerResources {
            memory_limit_in_bytes: i64::try_from(quantity(
                c.resources.as_ref().and_then(|r| r.limits.as_ref()),
                "memory",
                0,
            ))
            .unwrap_or(0),
            ..Default::default()
        };
        n.apply(p, c, &mut lcr);
        lcr
    }

    #[test]
    fn on_v2_the_whole_container_goes_on_oom_and_gets_no_swap() {
        let p = pod(
            "spec:\n  containers:\n  - name: a\n    resources: {limits: {memory: 64Mi, hugepages-2Mi: 4Mi}}\n",
        );
        let lcr = resources(&node(true), &p);
        assert_eq!(
            lcr.unified.get("memory.oom.group").map(String::as_str),
            Some("1")
        );
        assert_eq!(
            lcr.unified.get("memory.swap.max").map(String::as_str),
            Some("0")
        );
        let pages: Vec<(&str, u64)> = lcr
            .hugepage_limits
            .iter()
            .map(|h| (h.page_size.as_str(), h.limit))
            .collect();
        assert_eq!(pages, [("2MB", 4 << 20), ("1GB", 0)]);
        let single = NodeCgroups {
            single_process_oom_kill: true,
            ..node(true)
        };
        assert!(
            !resources(&single, &p)
                .unified
                .contains_key("memory.oom.group")
        );
    }

    #[test]
    fn on_v1_no_unified_files_and_swap_is_the_memory_limit() {
        let p = pod("spec:\n  containers:\n  - name: a\n    resources: {limits: {memory: 64Mi}}\n");
        let lcr = resources(&node(false), &p);
        assert!(lcr.unified.is_empty());
        assert_eq!(lcr.memory_swap_limit_in_bytes, 64 << 20);
        let no_accounting = NodeCgroups {
            swap_controller: false,
            ..node(false)
        };
        assert_eq!(resources(&no_accounting, &p).memory_swap_limit_in_bytes, 0);
        assert_eq!(resources(&no_accounting, &p).hugepage_limits.len(), 2);
    }

    #[test]
    fn limited_swap_gives_a_burstable_container_its_share() {
        let n = NodeCgroups {
            swap: SwapBehavior::LimitedSwap,
            ..node(true)
        };
        // 1 GiB requested of 4 GiB: a quarter of the 1 GiB of swap.
        let burstable = pod(
            "spec:\n  containers:\n  - name: a\n    resources: {requests: {memory: 1Gi}, limits: {memory: 2Gi}}\n",
        );
        assert_eq!(
            resources(&n, &burstable)
                .unified
                .get("memory.swap.max")
                .map(String::as_str),
            Some("268435456")
        );
        let guaranteed = pod(
            "spec:\n  containers:\n  - name: a\n    resources: {limits: {memory: 1Gi, cpu: 1}}\n",
        );
        assert_eq!(
            resources(&n, &guaranteed)
                .unified
                .get("memory.swap.max")
                .map(String::as_str),
            Some("0")
        );
    }
}
