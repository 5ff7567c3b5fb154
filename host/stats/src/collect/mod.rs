//! One stats sample of the node and its pods ([`Collector::collect`]): CPU and memory
//! from the cgroups (the pod cgroups wasmlet makes, the containers' below them; the
//! runtime's `ListContainerStats` for containers, and its `ListPodSandboxStats` for pods,
//! whose cgroup the agent cannot read), writable layers and the image filesystem from
//! the CRI, logs and emptyDirs from the disk, CPU rates from the previous sample.
//!
//! Whatever cannot be read is left out of the sample — a cgroup gone with its pod, a
//! filesystem that cannot be stat'ed, a CRI call the runtime does not implement — and
//! said once in the log ([`Complaints`]), never a failed sample.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use wasmlet_cri::proto;
use wasmlet_cri::{CriRuntime, ErrorKind};

use crate::cgroup::Memory;
use crate::node::{self, DEFAULT_INTERFACE, Fs, Interface, NodeFiles};
use crate::summary::{
    ContainerStats, CpuStats, FsStats, InterfaceStats, MemoryStats, NetworkStats, NodeStats,
    RlimitStats, RuntimeStats, Summary,
};

mod pod;

use pod::PodSources;

/// The sandbox label that carries the pod's UID (the kubelet's, which the agent sets).
const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";

/// A pod as the collector measures it.
#[derive(Debug, Clone, Default)]
pub struct PodInfo {
    /// UID.
    pub uid: String,
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// When its sandbox was made (Unix ns).
    pub start_time: i64,
    /// Its running containers.
    pub containers: Vec<ContainerRef>,
    /// Its log directory (`<podLogsDir>/<ns>_<name>_<uid>`).
    pub log_dir: PathBuf,
    /// Its emptyDir volumes on disk: name and directory.
    pub empty_dirs: Vec<(String, PathBuf)>,
    /// Its pod cgroup (`/wasmlet/pod<uid>`), when wasmlet made one.
    pub cgroup: Option<String>,
}

/// A running container of a pod.
#[derive(Debug, Clone, Default)]
pub struct ContainerRef {
    /// The runtime's id.
    pub id: String,
    /// Its name in the pod.
    pub name: String,
    /// When it started (Unix ns).
    pub started_at: i64,
    /// The image it runs, as the spec names it.
    pub image: String,
}

/// One sample: the kubelet's Summary, when it was taken, and what the Summary has no
/// field for (runtime ids, images, cgroups) that `/metrics/cadvisor` labels with.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// When the sample was taken (Unix ns).
    pub at: i64,
    /// The Summary.
    pub summary: Summary,
    /// Per pod UID: its cgroup and its containers' ids and images by name.
    pub pods: HashMap<String, PodMeta>,
}

/// What labels a pod's metrics besides its name.
#[derive(Debug, Clone, Default)]
pub struct PodMeta {
    /// The pod cgroup, when it has one.
    pub cgroup: Option<String>,
    /// Container name → (runtime id, image).
    pub containers: HashMap<String, (String, String)>,
}

/// What the collector measures: the node's pods.
pub trait PodLister: Send + Sync {
    /// The pods with a sandbox on the node now.
    fn pods(&self) -> Vec<PodInfo>;
}

/// Where the node is measured.
#[derive(Debug, Clone)]
pub struct CollectorSettings {
    /// The node's name.
    pub node_name: String,
    /// The kubelet's root directory: its filesystem is `nodefs`.
    pub root_dir: PathBuf,
    /// `/proc` and the cgroup filesystem.
    pub files: NodeFiles,
    /// The node's system containers (`kubelet`: the agent's own cgroups, `pods`: the
    /// parent of the pod cgroups), reported as the Summary's `systemContainers`.
    pub system_containers: Vec<SystemContainer>,
}

/// A system container: a name the Summary gives it and the cgroups it is measured in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemContainer {
    /// `kubelet`, `runtime`, `pods` or `misc`, as the kubelet names them.
    pub name: String,
    /// Its cgroups (a root cgroup, the whole machine's, is not read as one).
    pub cgroups: crate::cgroup::ProcessCgroups,
}

/// Items left out of a sample, each said in the log the first time only.
#[derive(Debug, Default)]
pub struct Complaints(HashSet<String>);

impl Complaints {
    /// Logs `what` unless it was said before; returns whether it was new.
    pub fn once(&mut self, what: &str, why: &dyn std::fmt::Display) -> bool {
        if self.0.contains(what) {
            return false;
        }
        tracing::warn!("stats: {what} left out of the summary: {why}");
        self.0.insert(what.to_owned());
        true
    }
}

/// How long what changes slowly is reused: memory limits, a pod's process (for its
/// network), and disk use of logs and emptyDirs (the kubelet's volumeStatsAggPeriod).
pub const SLOW_PERIOD_NS: i64 = 60_000_000_000;

/// Takes samples; keeps the previous CPU readings for rates, and what changes slowly.
pub struct Collector<R> {
    runtime: Arc<R>,
    pods: Arc<dyn PodLister>,
    settings: CollectorSettings,
    start_time: String,
    previous: HashMap<String, (u64, i64)>,
    complaints: Complaints,
    /// Memory limit per cgroup, and when it was read.
    limits: HashMap<String, (Option<u64>, i64)>,
    /// Disk use (bytes, inodes) per directory, and when it was measured.
    disk: HashMap<PathBuf, ((u64, u64), i64)>,
    /// A process in each pod (UID), to read its network namespace's counters from, and
    /// when a pod without one was last looked at.
    pids: HashMap<String, (Option<u32>, i64)>,
    /// The runtime answered `ListPodSandboxStats` with UNIMPLEMENTED: not asked again.
    no_sandbox_stats: bool,
    /// When the runtime last failed to measure a pod's sandbox (UID), or had no ready
    /// one: asked again once a minute.
    sandbox_failed: HashMap<String, i64>,
}

impl<R: CriRuntime> Collector<R> {
    /// A collector of the pods `pods` lists, on `runtime`.
    pub fn new(runtime: Arc<R>, pods: Arc<dyn PodLister>, settings: CollectorSettings) -> Self {
        Collector {
            runtime,
            pods,
            settings,
            start_time: rfc3339(now_ns()),
            previous: HashMap::new(),
            complaints: Complaints::default(),
            limits: HashMap::new(),
            disk: HashMap::new(),
            pids: HashMap::new(),
            no_sandbox_stats: false,
            sandbox_failed: HashMap::new(),
        }
    }

    /// `cgroup`'s memory limit, read once a minute.
    fn limit(&mut self, cg: &crate::cgroup::Cgroups, cgroup: &str, now: i64) -> Option<u64> {
        match self.limits.get(cgroup) {
            Some((l, at)) if now - at < SLOW_PERIOD_NS => *l,
            _ => {
                let l = cg.memory_limit(cgroup);
                self.limits.insert(cgroup.to_owned(), (l, now));
                l
            }
        }
    }

    /// Memory of `cgroup`, its limit from the cache.
    fn cgroup_memory(
        &mut self,
        cg: &crate::cgroup::Cgroups,
        cgroup: &str,
        now: i64,
        time: &str,
    ) -> Option<MemoryStats> {
        let m = cg.memory(cgroup).ok()?;
        let limit = self.limit(cg, cgroup, now);
        Some(memory(&m, limit, time))
    }

    /// Disk use under `dir`, measured once a minute.
    fn disk_usage(&mut self, dir: &std::path::Path, now: i64) -> Option<(u64, u64)> {
        match self.disk.get(dir) {
            Some((u, at)) if now - at < SLOW_PERIOD_NS => Some(*u),
            _ => {
                let u = node::disk_usage(dir).ok()?;
                self.disk.insert(dir.to_path_buf(), (u, now));
                Some(u)
            }
        }
    }

    /// The network of the pod's namespace, through a process of the pod (kept while
    /// it lives).
    fn pod_network(
        &mut self,
        uid: &str,
        cg: &crate::cgroup::Cgroups,
        cgroup: &str,
        now: i64,
        time: &str,
    ) -> Option<NetworkStats> {
        match self.pids.get(uid) {
            Some((Some(pid), _)) => {
                if let Ok(ifs) = self.settings.files.network(Some(*pid)) {
                    return Some(network(&ifs, time));
                }
            }
            // No process a moment ago: looked for again once a minute.
            Some((None, at)) if now - at < SLOW_PERIOD_NS => return None,
            _ => {}
        }
        let pid = cg.any_process(cgroup);
        self.pids.insert(uid.to_owned(), (pid, now));
        let ifs = self.settings.files.network(Some(pid?)).ok()?;
        Some(network(&ifs, time))
    }

    /// One sample of the node and every pod.
    pub async fn collect(&mut self) -> Sample {
        let pods = self.pods.pods();
        let cri_stats = self.container_stats().await;
        let image_fs = self.image_fs().await;
        let now = now_ns();
        let time = rfc3339(now);
        let node = self.node(now, &time, image_fs);
        let nodefs = node.fs.clone();
        let mut out = Vec::with_capacity(pods.len());
        for pod in &pods {
            // The pod cgroup's CPU counter, read first: it also says whether the agent
            // reads the cgroup. One the runtime was given that the agent cannot read
            // (no cgroup filesystem here, another layout) is the runtime's to measure.
            let pod_cpu = match (&self.settings.files.cgroups, pod.cgroup.as_deref()) {
                (Some(cg), Some(pc)) => cg.cpu_ns(pc).ok(),
                _ => None,
            };
            let sandbox = match (pod_cpu, &pod.cgroup) {
                (None, Some(_)) => self.sandbox_stats(&pod.uid, now).await,
                _ => None,
            };
            let from = PodSources {
                pod_cpu,
                sandbox: sandbox.as_ref(),
                containers: &cri_stats,
            };
            let at = pod::At {
                now,
                time: &time,
                nodefs: nodefs.as_ref(),
            };
            out.push(self.pod(pod, at, from));
        }
        // CPU readings not taken in this sample belong to what is gone.
        self.previous.retain(|_, (_, at)| *at == now);
        let live: HashSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
        self.pids.retain(|uid, _| live.contains(uid.as_str()));
        self.sandbox_failed
            .retain(|uid, _| live.contains(uid.as_str()));
        self.limits.retain(|_, (_, at)| now - *at < SLOW_PERIOD_NS);
        self.disk.retain(|_, (_, at)| now - *at < SLOW_PERIOD_NS);
        // Counters of pods and containers gone are closed.
        if let Some(cg) = &self.settings.files.cgroups {
            cg.sweep();
        }
        self.settings.files.open.sweep();
        let meta = pods
            .iter()
            .map(|p| {
                let containers = p
                    .containers
                    .iter()
                    .map(|c| (c.name.clone(), (c.id.clone(), c.image.clone())))
                    .collect();
                (
                    p.uid.clone(),
                    PodMeta {
                        cgroup: p.cgroup.clone(),
                        containers,
                    },
                )
            })
            .collect();
        Sample {
            at: now,
            summary: Summary { node, pods: out },
            pods: meta,
        }
    }

    async fn container_stats(&mut self) -> HashMap<String, proto::ContainerStats> {
        match self.runtime.list_container_stats(None).await {
            Ok(list) => list
                .into_iter()
                .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
                .collect(),
            Err(e) => {
                let what = if e.kind() == ErrorKind::Unimplemented {
                    "containers' writable layers (the runtime has no ListContainerStats)"
                } else {
                    "containers' writable layers (ListContainerStats failed)"
                };
                self.complaints.once(what, &e);
                HashMap::new()
            }
        }
    }

    /// The runtime's stats of pod `uid`'s ready sandbox (the newest attempt), found by
    /// the pod UID label the agent gives sandboxes.
    async fn sandbox_stats(&mut self, uid: &str, now: i64) -> Option<proto::LinuxPodSandboxStats> {
        if self.no_sandbox_stats
            || self
                .sandbox_failed
                .get(uid)
                .is_some_and(|at| now - at < SLOW_PERIOD_NS)
        {
            return None;
        }
        let filter = proto::PodSandboxStatsFilter {
            label_selector: [(POD_UID_LABEL.to_owned(), uid.to_owned())].into(),
            ..Default::default()
        };
        let list = match self.runtime.list_pod_sandbox_stats(Some(filter)).await {
            Ok(list) => list,
            Err(e) => {
                let what = if e.kind() == ErrorKind::Unimplemented {
                    self.no_sandbox_stats = true;
                    "pods whose cgroup the agent cannot read (the runtime has no ListPodSandboxStats)"
                } else {
                    self.sandbox_failed.insert(uid.to_owned(), now);
                    "pods whose cgroup the agent cannot read (ListPodSandboxStats failed)"
                };
                self.complaints.once(what, &e);
                return None;
            }
        };
        let newest = list
            .into_iter()
            .filter_map(|s| Some((s.attributes?.metadata?.attempt, s.linux?)))
            .max_by_key(|(attempt, _)| *attempt)
            .map(|(_, linux)| linux);
        if newest.is_none() {
            // No ready sandbox (the pod is ending): nothing to ask for a while either.
            self.sandbox_failed.insert(uid.to_owned(), now);
        }
        newest
    }

    async fn image_fs(&mut self) -> Option<FsStats> {
        let info = match self.runtime.image_fs_info().await {
            Ok(i) => i,
            Err(e) => {
                self.complaints
                    .once("the image filesystem (ImageFsInfo failed)", &e);
                return None;
            }
        };
        let usage = info.image_filesystems.first()?;
        let mountpoint = usage.fs_id.as_ref().map(|f| f.mountpoint.clone())?;
        // When the runtime measured it (now, if it does not say).
        let time = rfc3339(if usage.timestamp > 0 {
            usage.timestamp
        } else {
            now_ns()
        });
        let mut fs = FsStats {
            time,
            used_bytes: usage.used_bytes.as_ref().map(|v| v.value),
            inodes_used: usage.inodes_used.as_ref().map(|v| v.value),
            ..FsStats::default()
        };
        match node::filesystem(std::path::Path::new(&mountpoint)) {
            Ok(f) => {
                fs.capacity_bytes = Some(f.capacity);
                fs.available_bytes = Some(f.available);
                fs.inodes = Some(f.inodes);
                fs.inodes_free = Some(f.inodes_free);
            }
            Err(e) => {
                self.complaints
                    .once(&format!("the image filesystem's size ({mountpoint})"), &e);
            }
        }
        Some(fs)
    }

    fn node(&mut self, now: i64, time: &str, image_fs: Option<FsStats>) -> NodeStats {
        let files = self.settings.files.clone();
        let cpu = match files.cpu_ns() {
            Ok(ns) => Some(self.cpu("node".to_owned(), ns, now, time)),
            Err(e) => {
                self.complaints.once("the node's CPU", &e);
                None
            }
        };
        let memory = match (files.memory(), files.memory_capacity()) {
            (Ok(m), Ok(total)) => Some(memory(&m, Some(total), time)),
            (Err(e), _) | (_, Err(e)) => {
                self.complaints.once("the node's memory", &e);
                None
            }
        };
        let network = match files.network(None) {
            Ok(ifs) => Some(network(&ifs, time)),
            Err(e) => {
                self.complaints.once("the node's network", &e);
                None
            }
        };
        let fs = match node::filesystem(&self.settings.root_dir) {
            Ok(f) => Some(fs_stats(&f, time)),
            Err(e) => {
                let what = format!("the root filesystem ({})", self.settings.root_dir.display());
                self.complaints.once(&what, &e);
                None
            }
        };
        let rlimit = match files.processes() {
            Ok((max, cur)) => Some(RlimitStats {
                time: time.to_owned(),
                maxpid: i64::try_from(max).ok(),
                curproc: i64::try_from(cur).ok(),
            }),
            Err(e) => {
                self.complaints.once("the node's processes", &e);
                None
            }
        };
        NodeStats {
            node_name: self.settings.node_name.clone(),
            system_containers: self.system_containers(now, time),
            start_time: self.start_time.clone(),
            cpu,
            memory,
            network,
            fs,
            runtime: image_fs.map(|f| RuntimeStats { image_fs: Some(f) }),
            rlimit,
            swap: files.swap().ok().map(|s| swap(&s, time)),
        }
    }

    /// The system containers' CPU and memory (no filesystems, as the kubelet's).
    fn system_containers(&mut self, now: i64, time: &str) -> Vec<ContainerStats> {
        let Some(cg) = self.settings.files.cgroups.clone() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for s in self.settings.system_containers.clone() {
            let own = |c: &Option<String>| c.clone().filter(|c| c != "/");
            let cpu = own(&s.cgroups.cpu)
                .and_then(|c| cg.cpu_ns(&c).ok())
                .map(|ns| self.cpu(format!("system/{}", s.name), ns, now, time));
            let memory =
                own(&s.cgroups.memory).and_then(|m| self.cgroup_memory(&cg, &m, now, time));
            if cpu.is_none() && memory.is_none() {
                let what = format!("the {} system container", s.name);
                self.complaints
                    .once(&what, &format!("{:?} cannot be read", s.cgroups));
                continue;
            }
            out.push(ContainerStats {
                name: s.name,
                start_time: self.start_time.clone(),
                cpu,
                memory,
                ..ContainerStats::default()
            });
        }
        out
    }

    /// CPU stats for `key` with the rate since its previous reading.
    fn cpu(&mut self, key: String, ns: u64, now: i64, time: &str) -> CpuStats {
        let rate = self
            .previous
            .insert(key, (ns, now))
            .and_then(|(prev_ns, prev_t)| nano_cores(prev_ns, prev_t, ns, now));
        CpuStats {
            time: time.to_owned(),
            usage_nano_cores: rate,
            usage_core_nano_seconds: Some(ns),
        }
    }
}

/// CPU use between two readings, in billionths of a core: `None` when time did not
/// advance or the counter went back (a new cgroup under the same name).
pub fn nano_cores(prev_ns: u64, prev_t: i64, ns: u64, t: i64) -> Option<u64> {
    let dt = u64::try_from(t.checked_sub(prev_t)?)
        .ok()
        .filter(|d| *d > 0)?;
    let used = ns.checked_sub(prev_ns)?;
    Some(((u128::from(used) * 1_000_000_000) / u128::from(dt)) as u64)
}

fn sum<'a, T: 'a>(
    items: impl Iterator<Item = Option<&'a T>>,
    get: impl Fn(&T) -> Option<u64>,
) -> Option<u64> {
    let mut total = None;
    for v in items.flatten().filter_map(get) {
        total = Some(total.unwrap_or(0) + v);
    }
    total
}

/// Swap stats; what is available only where there is a limit.
pub(super) fn swap(s: &crate::cgroup::Swap, time: &str) -> crate::summary::SwapStats {
    crate::summary::SwapStats {
        time: time.to_owned(),
        swap_available_bytes: s.limit.map(|l| l.saturating_sub(s.usage)),
        swap_usage_bytes: Some(s.usage),
    }
}

/// Memory stats; `available` is the limit (the machine's for the node) less the
/// working set.
fn memory(m: &Memory, limit: Option<u64>, time: &str) -> MemoryStats {
    MemoryStats {
        time: time.to_owned(),
        available_bytes: limit.map(|l| l.saturating_sub(m.working_set)),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: Some(m.rss),
        page_faults: Some(m.page_faults),
        major_page_faults: Some(m.major_page_faults),
    }
}

/// A CRI counter's value, when the runtime gave one.
fn value(v: &Option<proto::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

/// A CRI CPU reading's cumulative counter.
fn cri_cpu_ns(cpu: Option<&proto::CpuUsage>) -> Option<u64> {
    value(&cpu?.usage_core_nano_seconds)
}

fn cri_memory(m: &proto::MemoryUsage, time: &str) -> MemoryStats {
    MemoryStats {
        time: time.to_owned(),
        available_bytes: value(&m.available_bytes),
        usage_bytes: value(&m.usage_bytes),
        working_set_bytes: value(&m.working_set_bytes),
        rss_bytes: value(&m.rss_bytes),
        page_faults: value(&m.page_faults),
        major_page_faults: value(&m.major_page_faults),
    }
}

/// The runtime's network usage of a sandbox: the default interface, and every one
/// (the default included) as the node's are listed.
fn cri_network(n: &proto::NetworkUsage, time: &str) -> NetworkStats {
    let stats = |i: &proto::NetworkInterfaceUsage| InterfaceStats {
        name: i.name.clone(),
        rx_bytes: value(&i.rx_bytes),
        rx_errors: value(&i.rx_errors),
        tx_bytes: value(&i.tx_bytes),
        tx_errors: value(&i.tx_errors),
    };
    let default = n.default_interface.as_ref().map(stats);
    NetworkStats {
        time: time.to_owned(),
        interfaces: default
            .iter()
            .cloned()
            .chain(n.interfaces.iter().map(stats))
            .collect(),
        default: default.unwrap_or_default(),
    }
}

fn network(ifs: &[Interface], time: &str) -> NetworkStats {
    let stats = |i: &Interface| InterfaceStats {
        name: i.name.clone(),
        rx_bytes: Some(i.rx_bytes),
        rx_errors: Some(i.rx_errors),
        tx_bytes: Some(i.tx_bytes),
        tx_errors: Some(i.tx_errors),
    };
    NetworkStats {
        time: time.to_owned(),
        default: ifs
            .iter()
            .find(|i| i.name == DEFAULT_INTERFACE)
            .map(stats)
            .unwrap_or_default(),
        interfaces: ifs.iter().map(stats).collect(),
    }
}

fn fs_stats(f: &Fs, time: &str) -> FsStats {
    FsStats {
        time: time.to_owned(),
        available_bytes: Some(f.available),
        capacity_bytes: Some(f.capacity),
        used_bytes: Some(f.used),
        inodes_free: Some(f.inodes_free),
        inodes: Some(f.inodes),
        inodes_used: Some(f.inodes.saturating_sub(f.inodes_free)),
    }
}

/// An item on the node's root filesystem: its size and free space are the
/// filesystem's, its use its own.
fn on_nodefs(nodefs: Option<&FsStats>, time: &str) -> FsStats {
    FsStats {
        time: time.to_owned(),
        available_bytes: nodefs.and_then(|f| f.available_bytes),
        capacity_bytes: nodefs.and_then(|f| f.capacity_bytes),
        inodes_free: nodefs.and_then(|f| f.inodes_free),
        inodes: nodefs.and_then(|f| f.inodes),
        ..FsStats::default()
    }
}

/// Now, in Unix nanoseconds.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Unix nanoseconds as the API's RFC 3339 (whole seconds); the epoch for 0.
pub fn rfc3339(ns: i64) -> String {
    wasmlet_agent::time::rfc3339(ns.max(0) / 1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_two_readings() {
        // 0.5 s of CPU over 2 s: a quarter core.
        assert_eq!(
            nano_cores(1_000_000_000, 0, 1_500_000_000, 2_000_000_000),
            Some(250_000_000)
        );
        assert_eq!(nano_cores(10, 5, 20, 5), None);
        assert_eq!(nano_cores(10, 5, 5, 10), None);
        assert_eq!(nano_cores(10, 10, 20, 5), None);
    }
}
