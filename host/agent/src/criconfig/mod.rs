//! Pods and containers as CRI configurations: [`wasmlet_core::criconfig`]'s, with the
//! node's part — what a container needs on the node's filesystem made before it starts
//! (`files`), the node's resolver and memory read, and where the Services come from
//! ([`services::ServiceSource`]).

use std::path::Path;

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_cri::proto;

mod files;
pub mod services;

pub use files::{hosts_file_content, prepare};
pub use wasmlet_core::criconfig::{
    CgroupParent, ConfigError, ETC_HOSTS, EnvData, HostPathKind, HostsFile, MASKED_PATHS,
    NoCgroups, NodeCgroups, NodeFile, READONLY_PATHS, SwapBehavior, dns_config, empty_dir_path,
    expand, expand_sub_path, field_ref, hostname_and_domain, hosts_file, kernel_hostname,
    legacy_log_symlink, log_directory, managed_volume_kind, managed_volume_path, parse_resolv_conf,
    pod_dir, pod_log_directory, resource_ref, resources, sandbox_config, termination_message_file,
};

/// The node facts pod configurations depend on, with the node's pod cgroup tree.
pub type NodeContext = wasmlet_core::criconfig::NodeContext<crate::cgroups::PodCgroups>;

/// A boxed future, for the dyn-compatible sources the configuration is made from
/// ([`services::ServiceSource`], the volume manager's `VolumeSource`).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A container's configuration, with what it needs on the node made first.
/// `restart_count` is its number of earlier instances; `pod_ip` the sandbox's IP (for
/// `status.podIP` references).
pub fn container_config(
    pod: &k8s::Pod,
    c: &k8s::Container,
    init: bool,
    restart_count: i32,
    pod_ip: &str,
    ctx: &NodeContext,
) -> Result<proto::ContainerConfig, ConfigError> {
    container_config_with(
        pod,
        c,
        init,
        restart_count,
        pod_ip,
        ctx,
        &EnvData::default(),
    )
}

/// [`container_config`] with the ConfigMaps, Secrets and Services its environment
/// refers to.
pub fn container_config_with(
    pod: &k8s::Pod,
    c: &k8s::Container,
    init: bool,
    restart_count: i32,
    pod_ip: &str,
    ctx: &NodeContext,
    refs: &EnvData,
) -> Result<proto::ContainerConfig, ConfigError> {
    let (config, files) = wasmlet_core::criconfig::container_config(
        pod,
        c,
        (init, restart_count),
        pod_ip,
        ctx,
        refs,
    )?;
    prepare(&files)?;
    Ok(config)
}

/// Reads the node's resolver configuration (empty if there is none).
pub fn node_dns(path: &Path) -> proto::DnsConfig {
    std::fs::read_to_string(path)
        .map(|t| parse_resolv_conf(&t))
        .unwrap_or_default()
}

/// Reads the node's memory from `/proc/meminfo` (0 if it cannot).
pub fn node_memory_bytes() -> u64 {
    meminfo_bytes("MemTotal:")
}

/// A `/proc/meminfo` line's amount in bytes (0 when unreadable).
fn meminfo_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Where the kernel lists the machine's huge page sizes.
pub const HUGEPAGES_DIR: &str = "/sys/kernel/mm/hugepages";

/// The machine's huge page sizes, each with the pages of it the kernel holds (bytes).
pub fn node_hugepages() -> Vec<(wasmlet_core::cgroups::hugetlb::PageSize, u64)> {
    let names: Vec<String> = std::fs::read_dir(HUGEPAGES_DIR)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    wasmlet_core::cgroups::hugetlb::page_sizes(names.iter().map(String::as_str))
        .into_iter()
        .map(|size| {
            let dir = format!("{HUGEPAGES_DIR}/hugepages-{}kB", size.bytes / 1024);
            let pages: u64 = std::fs::read_to_string(format!("{dir}/nr_hugepages"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
            let bytes = pages.saturating_mul(size.bytes);
            (size, bytes)
        })
        .collect()
}

/// The node's cgroup facts containers are configured by: its huge page sizes, whether
/// it is cgroup v2, whether swap is limited per cgroup there (beside this process's own
/// cgroup, as the kubelet looks), its memory and swap; `singleProcessOOMKill` (unset:
/// false on v2, always true on v1) and `memorySwap.swapBehavior` as configured.
pub fn node_cgroups(single_process_oom_kill: Option<bool>, swap: SwapBehavior) -> NodeCgroups {
    let root = Path::new("/sys/fs/cgroup");
    let v2 = root.join("cgroup.controllers").is_file();
    let swap_controller = if v2 {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let path = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or("/")
            .trim_start_matches('/')
            .to_owned();
        root.join(path).join("memory.swap.max").exists()
    } else {
        root.join("memory/memory.memsw.limit_in_bytes").exists()
    };
    NodeCgroups {
        hugepage_sizes: node_hugepages().into_iter().map(|(s, _)| s).collect(),
        v2,
        single_process_oom_kill: !v2 || single_process_oom_kill.unwrap_or(false),
        swap_controller,
        swap,
        memory_bytes: node_memory_bytes(),
        swap_bytes: meminfo_bytes("SwapTotal:"),
    }
}

#[cfg(test)]
mod tests;
