//! What the kubelet writes into its cgroup tree, computed from pods: a pod's cgroup
//! (cpu.shares from its CPU requests, a CFS quota and a memory limit when every
//! container has one, pod overhead included), the tiers (`besteffort` 2 shares,
//! `burstable` the shares of all its pods' requests), `kubepods` (node allocatable),
//! and cgroup v2's `cpu.weight` from shares. Requests and limits are the pod's
//! effective ones, the kubelet's rule for init containers and sidecars
//! (`restartPolicy: Always` init containers) included.

use crate::quantity::parse_quantity;
use k8s_openapi::api::core::v1 as k8s;

use super::tree::Qos;

/// The fewest shares a cgroup gets.
pub const MIN_SHARES: u64 = 2;
/// The most.
pub const MAX_SHARES: u64 = 262_144;
/// The CFS period the kubelet uses (100 ms).
pub const QUOTA_PERIOD: u64 = 100_000;
/// The smallest quota it writes (1 ms).
const MIN_QUOTA: i64 = 1_000;

/// `cpu.shares` for `milli` millicores: 1024 per CPU, at least 2, at most 262144.
pub fn milli_cpu_to_shares(milli: u64) -> u64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli.saturating_mul(1024) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// `cpu.cfs_quota_us` for a limit of `milli` millicores over `period` µs (at least 1 ms);
/// `None` without a limit.
pub fn milli_cpu_to_quota(milli: u64, period: u64) -> Option<i64> {
    if milli == 0 {
        return None;
    }
    let quota = i64::try_from(milli.saturating_mul(period) / 1000).unwrap_or(i64::MAX);
    Some(quota.max(MIN_QUOTA))
}

/// cgroup v2's `cpu.weight` (1–10000) for `shares` (2–262144), as runc converts them.
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + (shares.clamp(MIN_SHARES, MAX_SHARES) - 2) * 9999 / 262_142
}

/// A pod's cgroup settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PodResources {
    /// `cpu.shares`.
    pub cpu_shares: u64,
    /// `cpu.cfs_quota_us` (with the period [`QUOTA_PERIOD`]); `None`: no quota.
    pub cpu_quota: Option<i64>,
    /// `memory.limit_in_bytes` / `memory.max`; `None`: no limit.
    pub memory_limit: Option<u64>,
    /// The pod's effective CPU request in millicores (what the burstable tier sums).
    pub cpu_request_milli: u64,
}

/// Effective requests or limits of one kind: cpu in millicores, memory in bytes, and
/// whether every container declared one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Effective {
    cpu: u64,
    memory: u64,
    every_cpu: bool,
    every_memory: bool,
}

/// The amount of `name` in `list` at `scale` (3: millis), 0 when absent or unreadable.
pub(crate) fn quantity(
    list: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
    name: &str,
    scale: i32,
) -> u64 {
    list.and_then(|l| l.get(name))
        .and_then(|q| parse_quantity(&q.0, scale).ok())
        .unwrap_or(0)
}

/// One container's (cpu, memory) requests (`limits == false`) or limits; a request not
/// given is its limit, as the API server defaults it.
fn of(c: &k8s::Container, limits: bool) -> (u64, u64) {
    let r = c.resources.as_ref();
    let lim = r.and_then(|r| r.limits.as_ref());
    let req = r.and_then(|r| r.requests.as_ref());
    let pick = |name: &str, scale: i32| {
        let limit = quantity(lim, name, scale);
        if limits {
            return limit;
        }
        match req.and_then(|l| l.get(name)) {
            Some(_) => quantity(req, name, scale),
            None => limit,
        }
    };
    (pick("cpu", 3), pick("memory", 0))
}

/// The pod's effective requests or limits: the app containers and sidecars summed,
/// against the largest init container (plus the sidecars started before it), then
/// `overhead` added.
fn effective(pod: &k8s::Pod, limits: bool) -> Effective {
    let Some(spec) = pod.spec.as_ref() else {
        return Effective::default();
    };
    let mut every = (true, true);
    let mut note = |(cpu, mem): (u64, u64)| {
        every.0 &= cpu > 0;
        every.1 &= mem > 0;
        (cpu, mem)
    };
    let mut sum = (0u64, 0u64);
    for c in &spec.containers {
        let (cpu, mem) = note(of(c, limits));
        sum = (sum.0 + cpu, sum.1 + mem);
    }
    let (mut sidecars, mut init_max) = ((0u64, 0u64), (0u64, 0u64));
    for c in spec.init_containers.iter().flatten() {
        let (cpu, mem) = note(of(c, limits));
        let this = if c.restart_policy.as_deref() == Some("Always") {
            sum = (sum.0 + cpu, sum.1 + mem);
            sidecars = (sidecars.0 + cpu, sidecars.1 + mem);
            sidecars
        } else {
            (cpu + sidecars.0, mem + sidecars.1)
        };
        init_max = (init_max.0.max(this.0), init_max.1.max(this.1));
    }
    let overhead = spec.overhead.as_ref();
    Effective {
        cpu: sum.0.max(init_max.0) + quantity(overhead, "cpu", 3),
        memory: sum.1.max(init_max.1) + quantity(overhead, "memory", 0),
        every_cpu: every.0,
        every_memory: every.1,
    }
}

/// The pod's effective request of resource `name` in its base unit (bytes for huge
/// pages): app containers and sidecars summed, against the largest init container (with
/// the sidecars started before it), plus overhead — a request not given is its limit.
fn effective_amount(pod: &k8s::Pod, name: &str) -> u64 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let request = |c: &k8s::Container| {
        let r = c.resources.as_ref();
        let req = r.and_then(|r| r.requests.as_ref());
        if req.is_some_and(|l| l.contains_key(name)) {
            quantity(req, name, 0)
        } else {
            quantity(r.and_then(|r| r.limits.as_ref()), name, 0)
        }
    };
    let mut sum: u64 = spec.containers.iter().map(request).sum();
    let (mut sidecars, mut init_max) = (0u64, 0u64);
    for c in spec.init_containers.iter().flatten() {
        let amount = request(c);
        let this = if c.restart_policy.as_deref() == Some("Always") {
            sum += amount;
            sidecars += amount;
            sidecars
        } else {
            amount + sidecars
        };
        init_max = init_max.max(this);
    }
    sum.max(init_max) + quantity(spec.overhead.as_ref(), name, 0)
}

/// The pod's effective requests: CPU in millicores and memory in bytes (the kubelet's
/// `GetResourceRequest`: app containers and sidecars summed, against the largest init
/// container, plus overhead).
pub fn effective_requests(pod: &k8s::Pod) -> (u64, u64) {
    let e = effective(pod, false);
    (e.cpu, e.memory)
}

/// The pod cgroup's settings, as the kubelet's `ResourceConfigForPod`: Guaranteed pods
/// get shares, quota and memory limit; Burstable pods shares, and quota / memory limit
/// only when every container declared that limit; BestEffort pods 2 shares.
pub fn pod_resources(pod: &k8s::Pod, qos: Qos) -> PodResources {
    let requests = effective(pod, false);
    let limits = effective(pod, true);
    let shares = milli_cpu_to_shares(requests.cpu);
    let quota = milli_cpu_to_quota(limits.cpu, QUOTA_PERIOD);
    match qos {
        Qos::Guaranteed => PodResources {
            cpu_shares: shares,
            cpu_quota: quota,
            memory_limit: Some(limits.memory).filter(|m| *m > 0),
            cpu_request_milli: requests.cpu,
        },
        Qos::Burstable => PodResources {
            cpu_shares: shares,
            cpu_quota: quota.filter(|_| limits.every_cpu),
            memory_limit: Some(limits.memory).filter(|m| *m > 0 && limits.every_memory),
            cpu_request_milli: requests.cpu,
        },
        Qos::BestEffort => PodResources {
            cpu_shares: MIN_SHARES,
            ..PodResources::default()
        },
    }
}

/// A ceiling a cgroup file takes: a number, or none (`max`, `-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Max {
    /// No ceiling.
    Unlimited,
    /// At most this many (bytes, processes, µs of CPU per period).
    Of(u64),
}

impl Max {
    /// `Some(n)` is `Of(n)`, `None` unlimited.
    pub fn from_option(n: Option<u64>) -> Max {
        n.map_or(Max::Unlimited, Max::Of)
    }
}

/// What is written into one cgroup; a field left `None` is left as it is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    /// `cpu.shares` (v2: `cpu.weight` from it).
    pub cpu_shares: Option<u64>,
    /// The CFS quota in µs per [`QUOTA_PERIOD`] (v1 `cpu.cfs_quota_us`, v2 `cpu.max`).
    pub cpu_quota: Option<Max>,
    /// `memory.limit_in_bytes` / `memory.max`.
    pub memory: Option<Max>,
    /// `pids.max`.
    pub pids: Option<Max>,
    /// Huge page limits by size (`hugetlb.2MB.max`, [`super::hugetlb`]); empty: none
    /// written.
    pub hugetlb: Vec<(String, u64)>,
    /// `cpuset.cpus` in the kernel's list form (`0-3,6`), cgroup v2 only.
    pub cpuset: Option<String>,
}

impl PodResources {
    /// The pod cgroup's settings: every one written, an absent limit as none, so that a
    /// cgroup left by an earlier pod of the same UID gets nothing of it. `hugetlb`: the
    /// pod's huge page limits ([`pod_hugetlb`]).
    pub fn settings(&self, pids_limit: Option<u64>, hugetlb: Vec<(String, u64)>) -> Settings {
        Settings {
            cpu_shares: Some(self.cpu_shares),
            cpu_quota: Some(Max::from_option(
                self.cpu_quota.and_then(|q| u64::try_from(q).ok()),
            )),
            memory: Some(Max::from_option(self.memory_limit)),
            pids: Some(Max::from_option(pids_limit)),
            hugetlb,
            cpuset: None,
        }
    }
}

/// A pod's huge page limits for the machine's `sizes`: its containers' requests of each
/// size (app containers and sidecars summed, against the largest init container, as
/// for CPU and memory), 0 for a size it does not ask for.
pub fn pod_hugetlb(pod: &k8s::Pod, sizes: &[super::hugetlb::PageSize]) -> Vec<(String, u64)> {
    sizes
        .iter()
        .map(|size| {
            (
                size.cgroup_name(),
                effective_amount(pod, &size.resource_name()),
            )
        })
        .collect()
}

/// A CPU list in the kernel's form (`0-3,6`) as the bit mask systemd's `AllowedCPUs`
/// takes: byte 0 holds CPUs 0–7, lowest bit first. `None` for a list that does not
/// parse.
pub fn cpu_mask(list: &str) -> Option<Vec<u8>> {
    let mut mask: Vec<u8> = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (from, to) = match part.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ),
            None => {
                let n = part.trim().parse::<usize>().ok()?;
                (n, n)
            }
        };
        if from > to || to >= 1 << 16 {
            return None;
        }
        for cpu in from..=to {
            if mask.len() <= cpu / 8 {
                mask.resize(cpu / 8 + 1, 0);
            }
            mask[cpu / 8] |= 1 << (cpu % 8);
        }
    }
    Some(mask)
}

/// The `burstable` tier's shares: its pods' CPU requests together.
pub fn burstable_shares<'a>(pods: impl IntoIterator<Item = &'a PodResources>) -> u64 {
    milli_cpu_to_shares(pods.into_iter().map(|p| p.cpu_request_milli).sum())
}

/// The `besteffort` tier's shares.
pub const BESTEFFORT_SHARES: u64 = MIN_SHARES;

/// The node's pid capacity as the kubelet counts it: the smaller of `kernel.pid_max`
/// and `kernel.threads-max` (either may be unreadable; neither: unknown).
pub fn node_pid_capacity(pid_max: Option<&str>, threads_max: Option<&str>) -> Option<u64> {
    [pid_max, threads_max]
        .into_iter()
        .flatten()
        .filter_map(|text| text.trim().parse::<u64>().ok())
        .min()
}

/// `kubepods`' settings with node allocatable enforced (`enforceNodeAllocatable:
/// [pods]`): capacity less `kubeReserved` and `systemReserved` (the hard eviction
/// threshold is not taken off here: it is kept from scheduling, not from the pods'
/// cgroup), CPU as shares; without enforcement, the capacity.
pub fn kubepods(
    capacity_cpu_milli: u64,
    capacity_memory: u64,
    reserved_cpu_milli: u64,
    reserved_memory: u64,
    enforce: bool,
) -> (u64, u64) {
    let (cpu, memory) = if enforce {
        (
            capacity_cpu_milli.saturating_sub(reserved_cpu_milli),
            capacity_memory.saturating_sub(reserved_memory),
        )
    } else {
        (capacity_cpu_milli, capacity_memory)
    };
    (milli_cpu_to_shares(cpu), memory)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> k8s::Pod {
        serde_yaml_ng::from_str(yaml).expect("pod")
    }

    #[test]
    fn the_node_pid_capacity_is_the_smaller_kernel_limit() {
        // As /proc/sys/kernel/{pid_max,threads-max} read, newline included.
        assert_eq!(
            node_pid_capacity(Some("4194304\n"), Some("191903\n")),
            Some(191_903)
        );
        assert_eq!(node_pid_capacity(Some("32768\n"), None), Some(32_768));
        assert_eq!(node_pid_capacity(Some("x"), Some("")), None);
        assert_eq!(node_pid_capacity(None, None), None);
    }

    #[test]
    fn conversions_are_the_kubelets_and_runcs() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(500), 512);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(10_000_000), MAX_SHARES);
        assert_eq!(milli_cpu_to_quota(0, QUOTA_PERIOD), None);
        assert_eq!(milli_cpu_to_quota(1000, QUOTA_PERIOD), Some(100_000));
        assert_eq!(milli_cpu_to_quota(250, QUOTA_PERIOD), Some(25_000));
        assert_eq!(
            milli_cpu_to_quota(5, QUOTA_PERIOD),
            Some(1_000),
            "at least 1 ms"
        );
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
    }

    #[test]
    fn each_qos_class_gets_what_the_kubelet_sets() {
        let guaranteed = pod(
            "spec:\n  containers:\n  - name: a\n    resources: {limits: {cpu: '1', memory: 256Mi}}\n  overhead: {cpu: 100m, memory: 16Mi}\n",
        );
        assert_eq!(
            pod_resources(&guaranteed, Qos::Guaranteed),
            PodResources {
                cpu_shares: 1126,
                cpu_quota: Some(110_000),
                memory_limit: Some((256 + 16) << 20),
                cpu_request_milli: 1100,
            }
        );
        let burstable = pod(
            "spec:\n  containers:\n  - name: a\n    resources: {requests: {cpu: 500m}, limits: {cpu: '1'}}\n  - name: b\n    resources: {requests: {cpu: 250m, memory: 64Mi}}\n",
        );
        let b = pod_resources(&burstable, Qos::Burstable);
        assert_eq!(b.cpu_shares, 768);
        assert_eq!(b.cpu_quota, None, "b has no cpu limit");
        assert_eq!(b.memory_limit, None, "nothing limits memory everywhere");
        let best = pod("spec:\n  containers:\n  - name: a\n");
        assert_eq!(
            pod_resources(&best, Qos::BestEffort),
            PodResources {
                cpu_shares: 2,
                ..Default::default()
            }
        );
        assert_eq!(burstable_shares([&b, &b]), 1536);
        assert_eq!(burstable_shares([]), 2);
    }

    #[test]
    fn init_containers_and_sidecars_count_as_the_kubelet_counts_them() {
        // An init container bigger than the app: its request is the pod's.
        let p = pod(
            "spec:\n  initContainers:\n  - name: i\n    resources: {requests: {cpu: '2'}}\n  containers:\n  - name: a\n    resources: {requests: {cpu: 500m}}\n",
        );
        assert_eq!(pod_resources(&p, Qos::Burstable).cpu_request_milli, 2000);
        // A sidecar runs beside the app and beside later init containers.
        let p = pod(
            "spec:\n  initContainers:\n  - name: s\n    restartPolicy: Always\n    resources: {requests: {cpu: 300m}}\n  - name: i\n    resources: {requests: {cpu: 1}}\n  containers:\n  - name: a\n    resources: {requests: {cpu: 500m}}\n",
        );
        assert_eq!(pod_resources(&p, Qos::Burstable).cpu_request_milli, 1300);
    }

    #[test]
    fn cpu_lists_become_systemds_masks() {
        assert_eq!(cpu_mask("0-1"), Some(vec![0b11]));
        assert_eq!(cpu_mask("0-3,6\n"), Some(vec![0b0100_1111]));
        assert_eq!(cpu_mask("9"), Some(vec![0, 0b10]));
        assert_eq!(cpu_mask("3-1"), None);
        assert_eq!(cpu_mask("x"), None);
    }

    #[test]
    fn kubepods_carries_allocatable_when_enforced() {
        let (shares, memory) = kubepods(2000, 8 << 30, 500, 1 << 30, true);
        assert_eq!((shares, memory), (1536, 7 << 30));
        assert_eq!(
            kubepods(2000, 8 << 30, 500, 1 << 30, false),
            (2048, 8 << 30)
        );
        assert_eq!(
            kubepods(100, 1, 500, 2, true),
            (2, 0),
            "never below nothing"
        );
    }
}
