//! One pod's numbers in a sample: each container's CPU, memory, writable layer and
//! logs, the pod's emptyDirs, and the pod's own CPU, memory, processes and network —
//! from its pod cgroup where the agent reads it, else from the runtime's sandbox
//! stats, else summed over its containers.

use std::collections::HashMap;

use wasmlet_cri::CriRuntime;
use wasmlet_cri::proto;

use crate::cgroup::Cgroups;

use super::{
    Collector, ContainerRef, PodInfo, cri_cpu_ns, cri_memory, cri_network, on_nodefs, sum, value,
};
use crate::summary::{
    ContainerStats, CpuStats, FsStats, MemoryStats, PodReference, PodStats, ProcessStats,
    VolumeStats,
};

/// Where one pod's numbers come from besides its own files.
pub(super) struct PodSources<'a> {
    /// Its pod cgroup's CPU counter (`None`: no pod cgroup the agent reads).
    pub(super) pod_cpu: Option<u64>,
    /// The runtime's stats of its sandbox, asked for when the agent cannot read the pod
    /// cgroup the runtime was given.
    pub(super) sandbox: Option<&'a proto::LinuxPodSandboxStats>,
    /// The runtime's stats of containers, by id.
    pub(super) containers: &'a HashMap<String, proto::ContainerStats>,
}

/// When a sample is taken (Unix ns, and as printed) and the node filesystem that
/// logs, layers and emptyDirs are on.
#[derive(Clone, Copy)]
pub(super) struct At<'a> {
    pub(super) now: i64,
    pub(super) time: &'a str,
    pub(super) nodefs: Option<&'a FsStats>,
}

impl At<'_> {
    /// Usage of the node filesystem.
    fn fs(&self, (bytes, inodes): (Option<u64>, Option<u64>)) -> FsStats {
        FsStats {
            used_bytes: bytes,
            inodes_used: inodes,
            ..on_nodefs(self.nodefs, self.time)
        }
    }
}

/// Ephemeral storage a pod uses: bytes and inodes.
#[derive(Default)]
struct Ephemeral(u64, u64);

impl Ephemeral {
    fn add(&mut self, bytes: u64, inodes: u64) {
        self.0 += bytes;
        self.1 += inodes;
    }
}

impl<R: CriRuntime> Collector<R> {
    pub(super) fn pod(&mut self, pod: &PodInfo, at: At<'_>, from: PodSources<'_>) -> PodStats {
        // Read through a copy: measuring updates the collector's caches.
        let cgroups = self.settings.files.cgroups.clone();
        let cgroups = cgroups.as_ref();
        let pod_cgroup = pod.cgroup.as_deref().filter(|_| from.pod_cpu.is_some());
        let pod_own = cgroups.zip(pod_cgroup);
        let mut ephemeral = Ephemeral::default();
        let containers: Vec<ContainerStats> = pod
            .containers
            .iter()
            .map(|c| self.container(pod, c, pod_own, &from, at, &mut ephemeral))
            .collect();
        let volumes = self.empty_dirs(pod, at, &mut ephemeral);
        let (cpu, memory, processes) = self.pod_usage(pod, pod_own, &from, &containers, at);
        // The pod cgroup's swap; a pod has no swap limit of its own, so only its use.
        let swap = pod_own
            .and_then(|(cg, pc)| cg.swap(pc))
            .map(|s| super::swap(&crate::cgroup::Swap { limit: None, ..s }, at.time));
        let network = match pod_own {
            Some((cg, pc)) => self.pod_network(&pod.uid, cg, pc, at.now, at.time),
            None => from
                .sandbox
                .and_then(|s| s.network.as_ref())
                .map(|n| cri_network(n, at.time)),
        };
        PodStats {
            pod_ref: PodReference {
                name: pod.name.clone(),
                namespace: pod.namespace.clone(),
                uid: pod.uid.clone(),
            },
            start_time: super::rfc3339(pod.start_time),
            containers,
            cpu,
            memory,
            network,
            volume_stats: volumes,
            ephemeral_storage: Some(at.fs((Some(ephemeral.0), Some(ephemeral.1)))),
            process_stats: processes.map(|n| ProcessStats {
                process_count: Some(n),
            }),
            swap,
        }
    }

    /// One container: CPU and memory from its cgroup below the pod's (`pod_cgroup`:
    /// the cgroup filesystem and the pod's cgroup in it, when the agent reads it; else
    /// the runtime's stats), its writable layer and its logs (both counted as the pod's
    /// ephemeral storage).
    fn container(
        &mut self,
        pod: &PodInfo,
        c: &ContainerRef,
        pod_cgroup: Option<(&Cgroups, &str)>,
        from: &PodSources<'_>,
        at: At<'_>,
        ephemeral: &mut Ephemeral,
    ) -> ContainerStats {
        let own = pod_cgroup.map(|(cg, p)| (cg, container_cgroup(p, &c.id)));
        let from_cri = from.containers.get(&c.id);
        let mut stats = ContainerStats {
            name: c.name.clone(),
            start_time: super::rfc3339(c.started_at),
            ..ContainerStats::default()
        };
        let own_cpu = own.as_ref().and_then(|(cg, own)| cg.cpu_ns(own).ok());
        match (own, own_cpu) {
            (Some((cg, own)), Some(ns)) => {
                stats.cpu = Some(self.cpu(c.id.clone(), ns, at.now, at.time));
                stats.memory = self.cgroup_memory(cg, &own, at.now, at.time);
                stats.swap = cg.swap(&own).map(|s| super::swap(&s, at.time));
            }
            _ => {
                if let Some(s) = from_cri {
                    if let Some(ns) = cri_cpu_ns(s.cpu.as_ref()) {
                        stats.cpu = Some(self.cpu(c.id.clone(), ns, at.now, at.time));
                    }
                    stats.memory = s.memory.as_ref().map(|m| cri_memory(m, at.time));
                }
            }
        }
        if let Some(layer) = from_cri.and_then(|s| s.writable_layer.as_ref()) {
            let used = layer.used_bytes.as_ref().map(|v| v.value);
            let inodes = layer.inodes_used.as_ref().map(|v| v.value);
            ephemeral.add(used.unwrap_or(0), inodes.unwrap_or(0));
            stats.rootfs = Some(at.fs((used, inodes)));
        }
        if let Some((bytes, inodes)) = self.disk_usage(&pod.log_dir.join(&c.name), at.now) {
            ephemeral.add(bytes, inodes);
            stats.logs = Some(at.fs((Some(bytes), Some(inodes))));
        }
        stats
    }

    /// The pod's emptyDirs on the node's disk (counted as its ephemeral storage).
    fn empty_dirs(
        &mut self,
        pod: &PodInfo,
        at: At<'_>,
        ephemeral: &mut Ephemeral,
    ) -> Vec<VolumeStats> {
        let mut volumes = Vec::new();
        for (name, dir) in &pod.empty_dirs {
            if let Some((bytes, inodes)) = self.disk_usage(dir, at.now) {
                ephemeral.add(bytes, inodes);
                volumes.push(VolumeStats {
                    fs: at.fs((Some(bytes), Some(inodes))),
                    name: name.clone(),
                });
            }
        }
        volumes
    }

    /// The pod's CPU, memory and process count: its pod cgroup's, else the runtime's
    /// measure of its sandbox, else the sum of its containers.
    fn pod_usage(
        &mut self,
        pod: &PodInfo,
        pod_cgroup: Option<(&Cgroups, &str)>,
        from: &PodSources<'_>,
        containers: &[ContainerStats],
        at: At<'_>,
    ) -> (Option<CpuStats>, Option<MemoryStats>, Option<u64>) {
        let key = format!("pod/{}", pod.uid);
        let (now, time) = (at.now, at.time);
        match (pod_cgroup, from.sandbox) {
            (Some((cg, pc)), _) => {
                let cpu = from.pod_cpu.map(|ns| self.cpu(key, ns, now, time));
                let mem = self.cgroup_memory(cg, pc, now, time);
                (cpu, mem, cg.processes(pc).ok())
            }
            // No pod cgroup here: the runtime's measure of the sandbox.
            (None, Some(s)) => (
                cri_cpu_ns(s.cpu.as_ref()).map(|ns| self.cpu(key, ns, now, time)),
                s.memory.as_ref().map(|m| cri_memory(m, time)),
                s.process.as_ref().and_then(|p| value(&p.process_count)),
            ),
            (None, None) => {
                let cpu = sum(containers.iter().map(|c| c.cpu.as_ref()), |c| {
                    c.usage_core_nano_seconds
                })
                .map(|ns| self.cpu(key, ns, now, time));
                (cpu, summed_memory(containers, time), None)
            }
        }
    }
}

/// Container `id`'s cgroup below its pod's `pod_cgroup`, as containerd names it: under
/// the systemd driver (a pod slice) its scope `cri-containerd-<id>.scope`, else `<id>`.
fn container_cgroup(pod_cgroup: &str, id: &str) -> String {
    if pod_cgroup.trim_end_matches('/').ends_with(".slice") {
        format!("{pod_cgroup}/cri-containerd-{id}.scope")
    } else {
        format!("{pod_cgroup}/{id}")
    }
}

/// A pod's memory as the sum of its containers' (when nothing measures the pod).
fn summed_memory(containers: &[ContainerStats], time: &str) -> Option<MemoryStats> {
    let each = || containers.iter().map(|c| c.memory.as_ref());
    let ws = sum(each(), |m| m.working_set_bytes)?;
    Some(MemoryStats {
        time: time.to_owned(),
        working_set_bytes: Some(ws),
        usage_bytes: sum(each(), |m| m.usage_bytes),
        rss_bytes: sum(each(), |m| m.rss_bytes),
        ..MemoryStats::default()
    })
}

#[cfg(test)]
mod tests {
    use super::container_cgroup;

    #[test]
    fn a_containers_cgroup_is_named_as_containerd_names_it_for_the_driver() {
        assert_eq!(
            container_cgroup("/kubepods/burstable/podu", "abc"),
            "/kubepods/burstable/podu/abc"
        );
        assert_eq!(
            container_cgroup("/kubepods.slice/kubepods-pod_u.slice", "abc"),
            "/kubepods.slice/kubepods-pod_u.slice/cri-containerd-abc.scope"
        );
    }
}
