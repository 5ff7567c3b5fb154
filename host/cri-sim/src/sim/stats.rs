//! Resource usage as the simulator reports it: a modest, steady synthetic load per
//! running container (1 ms of CPU per second run, 4 MiB resident, a 4 KiB writable
//! layer), sandboxes as the sum of their containers with a network that grows with the
//! time the sandbox has run, and the image filesystem from the images held.

use tonic::Status;
use wasmlet_cri::labels::selector_matches;
use wasmlet_cri::proto::{self, ContainerState, PodSandboxState};

use super::{
    Container, Sandbox, Simulator, State, container_not_found, resolve_id, sandbox_not_found,
    unknown,
};

impl Simulator {
    /// `ContainerStats`.
    pub(crate) async fn container_stats(&self, id: &str) -> Result<proto::ContainerStats, Status> {
        self.enter("ContainerStats").await?;
        let st = self.inner.lock();
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| container_not_found(id))?;
        Ok(c.stats(self.inner.clock.now()))
    }

    /// `ListContainerStats`.
    pub(crate) async fn list_container_stats(
        &self,
        filter: Option<proto::ContainerStatsFilter>,
    ) -> Result<Vec<proto::ContainerStats>, Status> {
        self.enter("ListContainerStats").await?;
        let st = self.inner.lock();
        let filter = filter.unwrap_or_default();
        let now = self.inner.clock.now();
        let id = resolve_id(&filter.id, &st.containers);
        let sandbox = resolve_id(&filter.pod_sandbox_id, &st.sandboxes);
        Ok(st
            .containers
            .values()
            .filter(|c| id.as_deref().is_none_or(|id| c.id == id))
            .filter(|c| sandbox.as_deref().is_none_or(|s| c.sandbox_id == s))
            .filter(|c| selector_matches(&filter.label_selector, &c.config.labels))
            .map(|c| c.stats(now))
            .collect())
    }

    /// `PodSandboxStats`.
    pub(crate) async fn pod_sandbox_stats(
        &self,
        id: &str,
    ) -> Result<proto::PodSandboxStats, Status> {
        self.enter("PodSandboxStats").await?;
        let st = self.inner.lock();
        let s = st.sandboxes.get(id).ok_or_else(|| sandbox_not_found(id))?;
        s.stats(&st, self.inner.clock.now())
    }

    /// `ListPodSandboxStats`: ready sandboxes only, as containerd lists them; one it
    /// cannot measure fails the call.
    pub(crate) async fn list_pod_sandbox_stats(
        &self,
        filter: Option<proto::PodSandboxStatsFilter>,
    ) -> Result<Vec<proto::PodSandboxStats>, Status> {
        self.enter("ListPodSandboxStats").await?;
        let st = self.inner.lock();
        let filter = filter.unwrap_or_default();
        let now = self.inner.clock.now();
        let id = resolve_id(&filter.id, &st.sandboxes);
        st.sandboxes
            .values()
            .filter(|s| s.state == PodSandboxState::SandboxReady)
            .filter(|s| id.as_deref().is_none_or(|id| s.id == id))
            .filter(|s| selector_matches(&filter.label_selector, &s.config.labels))
            .map(|s| s.stats(&st, now))
            .collect()
    }

    /// `ImageFsInfo`.
    pub(crate) async fn image_fs_info(&self) -> Result<proto::ImageFsInfoResponse, Status> {
        self.enter("ImageFsInfo").await?;
        let st = self.inner.lock();
        let (bytes, count) = st
            .images
            .all()
            .fold((0, 0), |(b, n), i| (b + i.size, n + 1));
        Ok(proto::ImageFsInfoResponse {
            image_filesystems: vec![proto::FilesystemUsage {
                timestamp: self.inner.clock.now(),
                fs_id: Some(proto::FilesystemIdentifier {
                    mountpoint: "/var/lib/wasmlet-cri-sim/snapshots".into(),
                }),
                used_bytes: Some(proto::UInt64Value { value: bytes }),
                inodes_used: Some(proto::UInt64Value { value: count * 300 }),
            }],
            container_filesystems: Vec::new(),
        })
    }
}

impl Sandbox {
    /// Its usage: the sum of its containers', one process per running container plus the
    /// sandbox's own, and `eth0` counting 1 KiB each way per second since it was made.
    /// containerd measures a sandbox through its cgroup parent, and fails without one.
    fn stats(&self, st: &State, now: i64) -> Result<proto::PodSandboxStats, Status> {
        let parent = self
            .config
            .linux
            .as_ref()
            .map(|l| l.cgroup_parent.as_str())
            .unwrap_or_default();
        if parent.is_empty() {
            return Err(unknown(format!(
                "failed to obtain metrics for sandbox {:?}: failed to get cgroup metrics for \
                 sandbox {} because cgroupPath is empty",
                self.id, self.id
            )));
        }
        let own: Vec<&Container> = self
            .containers
            .iter()
            .filter_map(|id| st.containers.get(id))
            .collect();
        let running = own
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning)
            .count() as u64;
        let containers: Vec<proto::ContainerStats> = own.iter().map(|c| c.stats(now)).collect();
        let value = |v: u64| Some(proto::UInt64Value { value: v });
        let total = |get: fn(&proto::ContainerStats) -> Option<u64>| -> u64 {
            containers.iter().filter_map(get).sum()
        };
        let cpu = total(|c| Some(c.cpu.as_ref()?.usage_core_nano_seconds.as_ref()?.value));
        let rate = total(|c| Some(c.cpu.as_ref()?.usage_nano_cores.as_ref()?.value));
        let memory = total(|c| Some(c.memory.as_ref()?.working_set_bytes.as_ref()?.value));
        let seconds = ((now - self.created_at).max(0) / 1_000_000_000) as u64;
        let ready = self.state == PodSandboxState::SandboxReady;
        let eth0 = proto::NetworkInterfaceUsage {
            name: "eth0".into(),
            rx_bytes: value(seconds * 1024),
            rx_errors: value(0),
            tx_bytes: value(seconds * 1024),
            tx_errors: value(0),
        };
        Ok(proto::PodSandboxStats {
            attributes: Some(proto::PodSandboxAttributes {
                id: self.id.clone(),
                metadata: self.config.metadata.clone(),
                labels: self.config.labels.clone(),
                annotations: self.config.annotations.clone(),
            }),
            linux: Some(proto::LinuxPodSandboxStats {
                cpu: Some(proto::CpuUsage {
                    timestamp: now,
                    usage_core_nano_seconds: value(cpu),
                    usage_nano_cores: value(rate),
                }),
                memory: Some(proto::MemoryUsage {
                    timestamp: now,
                    working_set_bytes: value(memory),
                    usage_bytes: value(memory),
                    rss_bytes: value(memory),
                    ..Default::default()
                }),
                network: ready.then(|| proto::NetworkUsage {
                    timestamp: now,
                    default_interface: Some(eth0),
                    interfaces: Vec::new(),
                }),
                process: Some(proto::ProcessUsage {
                    timestamp: now,
                    process_count: value(running + u64::from(ready)),
                }),
                containers,
            }),
        })
    }
}

impl Container {
    fn stats(&self, now: i64) -> proto::ContainerStats {
        let running = self.state == ContainerState::ContainerRunning;
        // A modest, steady synthetic load: 1 ms of CPU per second run, 4 MiB resident.
        let ran_ns = if self.started_at > 0 {
            let end = if running { now } else { self.finished_at };
            (end - self.started_at).max(0) as u64
        } else {
            0
        };
        let value = |v: u64| Some(proto::UInt64Value { value: v });
        let memory = if running { 4 << 20 } else { 0 };
        proto::ContainerStats {
            attributes: Some(proto::ContainerAttributes {
                id: self.id.clone(),
                metadata: self.config.metadata.clone(),
                labels: self.config.labels.clone(),
                annotations: self.config.annotations.clone(),
            }),
            cpu: Some(proto::CpuUsage {
                timestamp: now,
                usage_core_nano_seconds: value(ran_ns / 1000),
                usage_nano_cores: value(if running { 1_000_000 } else { 0 }),
            }),
            memory: Some(proto::MemoryUsage {
                timestamp: now,
                working_set_bytes: value(memory),
                usage_bytes: value(memory),
                rss_bytes: value(memory),
                ..Default::default()
            }),
            writable_layer: Some(proto::FilesystemUsage {
                timestamp: now,
                fs_id: Some(proto::FilesystemIdentifier {
                    mountpoint: "/var/lib/wasmlet-cri-sim/snapshots".into(),
                }),
                used_bytes: value(4096),
                inodes_used: value(1),
            }),
            swap: None,
        }
    }
}
