//! How the agent runs pods: `containerRuntimeEndpoint`, `staticPodPath`,
//! `fileCheckFrequency`, `syncFrequency`, `maxPods`, `maxParallelStartCalls`, the
//! directories (`rootDir`, `podLogsDir`, `resolvConf`, `devicePluginDir`) and
//! `podPidsLimit`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};

use super::absolute;
use super::file::File;

/// The runtime's part of the configuration.
#[derive(Debug, Clone)]
pub(super) struct RuntimeSection {
    pub endpoint: String,
    pub static_pod_path: Option<PathBuf>,
    pub file_check_frequency: Duration,
    pub sync_frequency: Duration,
    pub max_pods: u32,
    pub max_parallel_start_calls: Option<u32>,
    pub pod_logs_dir: PathBuf,
    pub resolv_conf: PathBuf,
    pub pod_pids_limit: Option<u64>,
    pub device_plugin_dir: Option<PathBuf>,
}

/// `rootDir` (wasmlet's; the kubelet's `--root-dir`), checked.
pub(super) fn root_dir(f: &File) -> Result<PathBuf> {
    Ok(absolute("rootDir", f.root_dir.clone())?
        .unwrap_or_else(|| PathBuf::from("/var/lib/wasmlet")))
}

/// The runtime's fields, checked (defaults applied before).
pub(super) fn section(f: &mut File, root_dir: &Path) -> Result<RuntimeSection> {
    wasmlet_cri::Endpoint::parse(&f.container_runtime_endpoint)
        .map_err(|err| anyhow::anyhow!("containerRuntimeEndpoint: {err}"))?;
    let max_pods = match f.max_pods {
        n if n > 0 && n <= 100_000 => u32::try_from(n).unwrap_or(110),
        n => bail!("maxPods: {n} must be between 1 and 100000"),
    };
    let max_parallel_start_calls = match f.max_parallel_start_calls {
        None => None,
        Some(n) if (0..=10_000).contains(&n) => u32::try_from(n).ok(),
        Some(n) => bail!("maxParallelStartCalls: {n} must be between 0 (no limit) and 10000"),
    };
    let pod_pids_limit = match f.pod_pids_limit {
        None | Some(-1) => None,
        Some(n) if n > 0 => u64::try_from(n).ok(),
        Some(n) => bail!("podPidsLimit: {n} must be -1 (no limit) or a positive number"),
    };
    Ok(RuntimeSection {
        endpoint: std::mem::take(&mut f.container_runtime_endpoint),
        static_pod_path: absolute("staticPodPath", f.static_pod_path.take())?,
        file_check_frequency: f.file_check_frequency.0,
        sync_frequency: f.sync_frequency.0,
        max_pods,
        max_parallel_start_calls,
        pod_logs_dir: absolute("podLogsDir", f.pod_logs_dir.take())?
            .unwrap_or_else(|| root_dir.join("pod-logs")),
        resolv_conf: f
            .resolv_conf
            .take()
            .unwrap_or_else(|| PathBuf::from("/etc/resolv.conf")),
        pod_pids_limit,
        device_plugin_dir: device_plugin_dir(f.device_plugin_dir.take())?,
    })
}

/// `devicePluginDir` (wasmlet's): where device plugins register, the kubelet's
/// directory unless given (the plugins look for `kubelet.sock` there); empty turns
/// device plugins off.
fn device_plugin_dir(given: Option<PathBuf>) -> Result<Option<PathBuf>> {
    match given {
        None => Ok(Some(PathBuf::from(
            wasmlet_devices::registration::DEFAULT_DIR,
        ))),
        Some(p) if p.as_os_str().is_empty() => Ok(None),
        Some(p) => absolute("devicePluginDir", Some(p)),
    }
}
