//! The pods' cgroup tree: `cgroupsPerQOS`, `cgroupRoot`, `cgroupDriver`, and node
//! allocatable enforcement (`enforceNodeAllocatable`, `systemReservedCgroup`,
//! `kubeReservedCgroup`), checked as the kubelet checks them; `failCgroupV1`.

use std::path::Path;

use anyhow::{Result, bail};
use wasmlet_agent::cgroups::tree::Driver;
use wasmlet_agent::criconfig::SwapBehavior;
use wasmlet_agent::node::Reserved;

use super::file::File;
use super::node::reserved;

/// A reservation enforced on a cgroup of its own (`system-reserved`, `kube-reserved`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedCgroup {
    /// The field naming the cgroup (`systemReservedCgroup`), for errors.
    pub field: &'static str,
    /// The cgroup, as the driver names it.
    pub cgroup: String,
    /// What it is limited to.
    pub reserved: Reserved,
}

/// The pods' cgroup tree, when `cgroupsPerQOS` is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    /// `cgroupDriver`.
    pub driver: Driver,
    /// `cgroupRoot` (`/` when not given).
    pub root: String,
    /// `pods` in `enforceNodeAllocatable`: `kubepods` limited to allocatable, not the
    /// capacity.
    pub enforce_pods: bool,
    /// `system-reserved` / `kube-reserved` in `enforceNodeAllocatable`.
    pub reserved: Vec<ReservedCgroup>,
}

/// How containers' cgroups are configured beyond their resources: `singleProcessOOMKill`
/// and `memorySwap.swapBehavior`, checked as the kubelet checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContainerCgroups {
    /// `singleProcessOOMKill` as written (`None`: the default, false on cgroup v2).
    pub single_process_oom_kill: Option<bool>,
    /// `memorySwap.swapBehavior`.
    pub swap: SwapBehavior,
}

/// `singleProcessOOMKill` and `memorySwap`: false is refused on a v1 host (where it is
/// always true), a swap behaviour other than NoSwap and LimitedSwap is refused.
pub(super) fn containers(f: &File) -> Result<ContainerCgroups> {
    let v1 = !Path::new(CGROUP_FS).join("cgroup.controllers").is_file();
    if v1 && f.single_process_oom_kill == Some(false) {
        bail!(
            "singleProcessOOMKill: must not be explicitly set to false when using cgroup v1 \
             (an OOM kill there takes one process)"
        );
    }
    let swap = match f.memory_swap.swap_behavior.as_str() {
        "" | "NoSwap" => SwapBehavior::NoSwap,
        "LimitedSwap" => SwapBehavior::LimitedSwap,
        other => bail!(
            "memorySwap.swapBehavior: {other:?} must be one of: \"\", \"LimitedSwap\" or \"NoSwap\""
        ),
    };
    Ok(ContainerCgroups {
        single_process_oom_kill: f.single_process_oom_kill,
        swap,
    })
}

/// Where the host's cgroups are mounted.
const CGROUP_FS: &str = "/sys/fs/cgroup";

/// `failCgroupV1: true`: an error on a host whose cgroups at `root` are v1 (no
/// `cgroup.controllers`: not the unified hierarchy), in the kubelet's words.
fn refuse_cgroup_v1(root: &Path) -> Result<()> {
    if root.join("cgroup.controllers").is_file() {
        return Ok(());
    }
    bail!(
        "failCgroupV1: kubelet is configured to not run on a host using cgroup v1. cgroup v1 \
         support is in maintenance mode (no {}/cgroup.controllers)",
        root.display()
    )
}

/// The tree as configured; `None` with `cgroupsPerQOS: false` (pods go where the
/// runtime puts them).
pub(super) fn section(f: &mut File) -> Result<Option<Cgroups>> {
    if f.fail_cgroup_v1 == Some(true) {
        refuse_cgroup_v1(Path::new(CGROUP_FS))?;
    }
    let driver = match f.cgroup_driver.as_str() {
        "cgroupfs" => Driver::Cgroupfs,
        "systemd" => Driver::Systemd,
        other => bail!("cgroupDriver: {other:?} must be cgroupfs or systemd"),
    };
    let root = match f.cgroup_root.as_str() {
        "" => "/".to_owned(),
        r if r.starts_with('/') => r.to_owned(),
        r => bail!("cgroupRoot: {r:?} must be an absolute cgroup path"),
    };
    if driver == Driver::Systemd && root != "/" && !root.trim_end_matches('/').ends_with(".slice") {
        bail!(
            "cgroupRoot: {root:?}: with cgroupDriver systemd it must be a slice (such as /wasmlet.slice) or /"
        );
    }
    // `None` (not written) is the kubelet's default; an empty list, or `none`, nothing.
    let written = f.enforce_node_allocatable.is_some();
    let enforce: Vec<String> = f
        .enforce_node_allocatable
        .take()
        .unwrap_or_else(|| vec!["pods".into()])
        .into_iter()
        .filter(|e| !e.is_empty())
        .collect();
    let mut enforce_pods = false;
    let mut enforced = Vec::new();
    for key in &enforce {
        match key.as_str() {
            "pods" => enforce_pods = true,
            "system-reserved" => enforced.push((
                "systemReservedCgroup",
                &f.system_reserved_cgroup,
                "systemReserved",
                &f.system_reserved,
            )),
            "kube-reserved" => enforced.push((
                "kubeReservedCgroup",
                &f.kube_reserved_cgroup,
                "kubeReserved",
                &f.kube_reserved,
            )),
            "none" if enforce.len() == 1 => {}
            "none" => bail!(
                "enforceNodeAllocatable: may not contain other enforcements when \"none\" is given"
            ),
            other => bail!(
                "enforceNodeAllocatable: {other:?}: valid options are \"pods\", \"system-reserved\", \"kube-reserved\" or \"none\""
            ),
        }
    }
    let mut reserved_cgroups = Vec::new();
    for (field, cgroup, amounts, map) in enforced {
        if cgroup.is_empty() {
            bail!(
                "enforceNodeAllocatable: enforcing {amounts} needs {field}: the cgroup the reservation is enforced on"
            );
        }
        reserved_cgroups.push(ReservedCgroup {
            field,
            cgroup: cgroup.clone(),
            reserved: reserved(amounts, map)?,
        });
    }
    if f.cgroups_per_qos == Some(false) {
        // The default enforcement has no tree to act on; asking for one is an error.
        if written && !enforce.is_empty() && enforce != ["none"] {
            bail!(
                "enforceNodeAllocatable: not supported unless cgroupsPerQOS is true (set it to [] or \"none\")"
            );
        }
        return Ok(None);
    }
    Ok(Some(Cgroups {
        driver,
        root,
        enforce_pods,
        reserved: reserved_cgroups,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_cgroup_v1_refuses_only_a_v1_host() {
        let dir = std::env::temp_dir().join(format!("wasmlet-cgroupv1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let e = refuse_cgroup_v1(&dir).expect_err("v1");
        assert!(
            e.to_string().starts_with(
                "failCgroupV1: kubelet is configured to not run on a host using cgroup v1"
            ),
            "{e}"
        );
        std::fs::write(dir.join("cgroup.controllers"), "cpu memory").expect("write");
        refuse_cgroup_v1(&dir).expect("v2");
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
