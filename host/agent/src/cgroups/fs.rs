//! The cgroup filesystem: making a cgroup and writing its [`Settings`], on cgroup v1 (one
//! mount per controller under the root: `cpu/`, `memory/`, `pids/`, …) and v2 (one tree,
//! `cgroup.controllers` at the root, controllers enabled down the path); listing and
//! removing cgroups in every hierarchy.
//!
//! A cgroup is named by its cgroupfs path from the root (`/kubepods/burstable/pod<uid>`,
//! or under the systemd driver the slice path systemd made it at).

use std::io;
use std::path::{Path, PathBuf};

use super::values::{Max, QUOTA_PERIOD, Settings, shares_to_weight};

/// The controllers wasmlet writes to (and so makes cgroups in, on v1; runc makes the
/// pod's path in the others when it starts the sandbox). On v2 every controller the
/// root offers is enabled down the path, as runc enables them for the kubelet.
const CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];

/// The huge page controller (written when the machine has huge page sizes).
pub const HUGETLB: &str = "hugetlb";

/// The pids controller (`podPidsLimit`, `kubepods`' pid capacity).
pub const PIDS: &str = "pids";

/// The controllers a node may lack or not let the agent write, as the kubelet treats
/// them: the tree is made without them (their limits not applied), never refused. The
/// cpu and memory hierarchies are required ([`CgroupFs::detect`]).
pub const OPTIONAL: [&str; 2] = [PIDS, HUGETLB];

/// An optional controller that cannot be written here, and why: the tree is made
/// without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The controller (`hugetlb`).
    pub controller: &'static str,
    /// Where it was looked for (its v1 hierarchy, or the v2 cgroup that lacks it).
    pub path: PathBuf,
    /// Why it cannot be written: not mounted, not a cgroup hierarchy, read-only, not
    /// delegated.
    pub why: String,
}

/// No cgroup filesystem where one was looked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no cgroup filesystem at {} (neither cgroup.controllers nor a {missing} hierarchy)",
    root.display()
)]
pub struct NoCgroupFs {
    /// Where it was looked for.
    pub root: PathBuf,
    /// The v1 hierarchy that is missing too.
    pub missing: &'static str,
}

/// A cgroup filesystem mounted at `root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupFs {
    root: PathBuf,
    v2: bool,
    /// The optional v1 hierarchies that cannot be written (looked at once, when the
    /// filesystem is first seen; on v2 a cgroup's own `cgroup.controllers` says).
    skipped: Vec<Skipped>,
}

impl CgroupFs {
    /// The cgroup filesystem at `root` (`/sys/fs/cgroup`): v2 when `cgroup.controllers`
    /// is there, v1 when the cpu and memory hierarchies are; otherwise why not.
    pub fn detect(root: &Path) -> Result<CgroupFs, NoCgroupFs> {
        if root.join("cgroup.controllers").is_file() {
            return Ok(CgroupFs::at(root, true));
        }
        match ["cpu", "memory"].iter().find(|c| !root.join(c).is_dir()) {
            None => Ok(CgroupFs::at(root, false)),
            Some(missing) => Err(NoCgroupFs {
                root: root.to_owned(),
                missing,
            }),
        }
    }

    /// A cgroup filesystem laid out as v1 or v2 at `root` (tests make one in a
    /// temporary directory), its optional v1 hierarchies looked at as
    /// [`CgroupFs::detect`] does.
    pub fn at(root: &Path, v2: bool) -> CgroupFs {
        let skipped = if v2 {
            Vec::new()
        } else {
            OPTIONAL
                .iter()
                .filter_map(|c| unwritable_v1(root, c))
                .collect()
        };
        CgroupFs {
            root: root.to_path_buf(),
            v2,
            skipped,
        }
    }

    /// The optional controllers `cgroup` is made and written without, and why: on v1
    /// the hierarchies that are absent, not a cgroup mount, read-only or not this
    /// process's to write; on v2 those the root does not offer or `cgroup` (which must
    /// exist) was not given by the `cgroup.subtree_control` above it.
    pub fn skipped_at(&self, cgroup: &str) -> Vec<Skipped> {
        if !self.v2 {
            return self.skipped.clone();
        }
        let dir = self.dir("", cgroup);
        OPTIONAL
            .iter()
            .filter(|c| !self.enabled_at(&dir, c))
            .map(|c| Skipped {
                controller: c,
                path: dir.clone(),
                why: if self.has_controller(c) {
                    "not enabled for this cgroup (not delegated to it)".into()
                } else {
                    format!("not offered by {}", self.root.display())
                },
            })
            .collect()
    }

    /// Whether this is the unified hierarchy (cgroup v2).
    pub fn v2(&self) -> bool {
        self.v2
    }

    /// Where the mount is.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of `cgroup` in `controller`'s hierarchy (the one tree on v2).
    pub fn dir(&self, controller: &str, cgroup: &str) -> PathBuf {
        let rel = cgroup.trim_matches('/');
        if self.v2 {
            self.root.join(rel)
        } else {
            self.root.join(controller).join(rel)
        }
    }

    /// Whether the kernel offers `controller` here: in the root's `cgroup.controllers`
    /// (v2), as a hierarchy this process can write (v1: an optional one that cannot be
    /// written is skipped).
    pub fn has_controller(&self, controller: &str) -> bool {
        if self.v2 {
            lists(&self.root, controller).unwrap_or(false)
        } else {
            self.root.join(controller).is_dir()
                && !self.skipped.iter().any(|s| s.controller == controller)
        }
    }

    /// Whether `controller`'s files can be written in the v2 cgroup `dir`: enabled for
    /// it where the kernel lists its controllers (only what the root offers can be), else
    /// (a plain directory) offered by the root. One read on a node's pod path.
    fn enabled_at(&self, dir: &Path, controller: &str) -> bool {
        lists(dir, controller).unwrap_or_else(|| self.has_controller(controller))
    }

    /// Whether `controller` is written for `cgroup`: a v1 hierarchy this process can
    /// write, a controller enabled for the v2 cgroup.
    fn writes(&self, controller: &str, cgroup: &str) -> bool {
        if self.v2 {
            self.enabled_at(&self.dir(controller, cgroup), controller)
        } else {
            self.has_controller(controller)
        }
    }

    /// Whether `cgroup` exists (in the memory hierarchy on v1).
    pub fn exists(&self, cgroup: &str) -> bool {
        self.dir("memory", cgroup).is_dir()
    }

    /// Makes `cgroup` (and what is above it) and writes `settings`. Idempotent.
    pub fn apply(&self, cgroup: &str, settings: &Settings) -> io::Result<()> {
        if self.v2 {
            self.make_v2(cgroup)?;
        } else {
            for controller in CONTROLLERS {
                if self.has_controller(controller) {
                    let dir = self.dir(controller, cgroup);
                    std::fs::create_dir_all(&dir).map_err(|e| at(&dir, e))?;
                }
            }
        }
        self.write(cgroup, settings)
    }

    /// Writes `settings` into an existing `cgroup`.
    pub fn write(&self, cgroup: &str, s: &Settings) -> io::Result<()> {
        let cpu = self.dir("cpu", cgroup);
        let memory = self.dir("memory", cgroup);
        let pids = self.dir("pids", cgroup);
        if self.v2 {
            if let Some(shares) = s.cpu_shares {
                put(
                    &cpu.join("cpu.weight"),
                    &shares_to_weight(shares).to_string(),
                )?;
            }
            if let Some(quota) = s.cpu_quota {
                put(
                    &cpu.join("cpu.max"),
                    &format!("{} {QUOTA_PERIOD}", v2_max(quota)),
                )?;
            }
            if let Some(m) = s.memory {
                put(&memory.join("memory.max"), &v2_max(m))?;
            }
            if let Some(cpus) = &s.cpuset {
                put(&cpu.join("cpuset.cpus"), cpus)?;
            }
        } else {
            if let Some(shares) = s.cpu_shares {
                put(&cpu.join("cpu.shares"), &shares.to_string())?;
            }
            if let Some(quota) = s.cpu_quota {
                put(&cpu.join("cpu.cfs_period_us"), &QUOTA_PERIOD.to_string())?;
                put(&cpu.join("cpu.cfs_quota_us"), &v1_max(quota))?;
            }
            if let Some(m) = s.memory {
                put(&memory.join("memory.limit_in_bytes"), &v1_max(m))?;
            }
        }
        if let Some(p) = s.pids
            && self.writes(PIDS, cgroup)
        {
            put(&pids.join("pids.max"), &v2_max(p))?;
        }
        self.write_hugetlb(cgroup, &s.hugetlb)
    }

    /// What a cgroup systemd made gets beside systemd's properties (runc's systemd
    /// driver does the same): on v2 every offered controller enabled down to it, then
    /// its huge page limits.
    pub fn write_unmanaged(&self, cgroup: &str, s: &Settings) -> io::Result<()> {
        if self.v2 {
            self.make_v2(cgroup)?;
        }
        self.write_hugetlb(cgroup, &s.hugetlb)
    }

    /// Each size's huge page limit, and its reservation limit where the kernel has one
    /// (`hugetlb.<size>.rsvd.*`, as runc writes both); nothing without the controller.
    fn write_hugetlb(&self, cgroup: &str, limits: &[(String, u64)]) -> io::Result<()> {
        if limits.is_empty() || !self.writes(HUGETLB, cgroup) {
            return Ok(());
        }
        let dir = self.dir(HUGETLB, cgroup);
        if !self.v2 {
            // Its own hierarchy on v1: the cgroup is made there too, as in the others.
            std::fs::create_dir_all(&dir).map_err(|e| at(&dir, e))?;
        }
        let suffix = if self.v2 { "max" } else { "limit_in_bytes" };
        for (size, limit) in limits {
            let value = limit.to_string();
            put(&dir.join(format!("hugetlb.{size}.{suffix}")), &value)?;
            let reserved = dir.join(format!("hugetlb.{size}.rsvd.{suffix}"));
            if reserved.exists() {
                put(&reserved, &value)?;
            }
        }
        Ok(())
    }

    /// Makes `cgroup` on v2 with every controller the root offers enabled for it from
    /// the root down (runc's `CreateCgroupPath`, which the kubelet's tree is made with).
    fn make_v2(&self, cgroup: &str) -> io::Result<()> {
        let offered =
            std::fs::read_to_string(self.root.join("cgroup.controllers")).unwrap_or_default();
        let offered: Vec<&str> = offered.split_whitespace().collect();
        let mut dir = self.root.clone();
        for part in cgroup.split('/').filter(|p| !p.is_empty()) {
            enable_controllers(&dir, &offered);
            dir.push(part);
            if !dir.is_dir() {
                std::fs::create_dir(&dir)
                    .or_else(|e| {
                        if e.kind() == io::ErrorKind::AlreadyExists {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })
                    .map_err(|e| at(&dir, e))?;
            }
        }
        Ok(())
    }

    /// Every hierarchy's mount: the root (v2) or each directory under it (v1).
    fn hierarchies(&self) -> Vec<PathBuf> {
        if self.v2 {
            return vec![self.root.clone()];
        }
        std::fs::read_dir(&self.root)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The names of the cgroups directly under `cgroup`, in any hierarchy.
    pub fn children(&self, cgroup: &str) -> Vec<String> {
        let rel = cgroup.trim_matches('/');
        let mut names: Vec<String> = self
            .hierarchies()
            .into_iter()
            .filter_map(|h| std::fs::read_dir(h.join(rel)).ok())
            .flatten()
            .flatten()
            // The directory entry's own type: no stat of each (housekeeping runs this
            // over every hierarchy and pod).
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Removes `cgroup` and the empty cgroups below it in every hierarchy. What still
    /// holds processes stays: returns those directories.
    pub fn remove(&self, cgroup: &str) -> Vec<PathBuf> {
        let rel = cgroup.trim_matches('/');
        let mut left = Vec::new();
        for h in self.hierarchies() {
            let dir = h.join(rel);
            match remove_tree(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::debug!(cgroup = %dir.display(), error = %e, "cgroup not removed");
                    left.push(dir);
                }
            }
        }
        left
    }
}

/// Whether the v2 cgroup `dir`'s `cgroup.controllers` lists `controller`; `None` where it
/// has no such file.
fn lists(dir: &Path, controller: &str) -> Option<bool> {
    std::fs::read_to_string(dir.join("cgroup.controllers"))
        .ok()
        .map(|c| c.split_whitespace().any(|x| x == controller))
}

/// Why the optional v1 hierarchy `controller` under `root` cannot be written, if it
/// cannot: absent; a directory on another filesystem than the cpu hierarchy's (a
/// controller systemd failed to mount leaves its empty directory on the read-only tmpfs
/// at the root, and the kubelet, which looks for cgroup mounts, does not see it); not
/// writable by this process (a read-only mount, a hierarchy not delegated to it).
fn unwritable_v1(root: &Path, controller: &'static str) -> Option<Skipped> {
    let path = root.join(controller);
    let skipped = |why: String| {
        Some(Skipped {
            controller,
            path: path.clone(),
            why,
        })
    };
    if !path.is_dir() {
        return skipped("no such hierarchy".into());
    }
    let fs_type = |p: &Path| rustix::fs::statfs(p).ok().map(|s| s.f_type);
    let required = fs_type(&root.join("cpu"));
    if required.is_some() && fs_type(&path) != required {
        return skipped(format!(
            "not a cgroup hierarchy (another filesystem than {})",
            root.join("cpu").display()
        ));
    }
    match rustix::fs::access(&path, rustix::fs::Access::WRITE_OK) {
        Ok(()) => None,
        Err(e) => skipped(io::Error::from(e).to_string()),
    }
}

fn v1_max(m: Max) -> String {
    match m {
        Max::Unlimited => "-1".into(),
        Max::Of(n) => n.to_string(),
    }
}

fn v2_max(m: Max) -> String {
    match m {
        Max::Unlimited => "max".into(),
        Max::Of(n) => n.to_string(),
    }
}

fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Writes a cgroup file, the error naming it.
fn put(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| at(path, e))
}

/// Enables `offered` for the children of a v2 cgroup (each on its own: one that cannot
/// be enabled here must not keep the others off; what is already on is not written).
fn enable_controllers(dir: &Path, offered: &[&str]) {
    let control = dir.join("cgroup.subtree_control");
    let on = std::fs::read_to_string(&control).unwrap_or_default();
    for c in offered {
        if !on.split_whitespace().any(|x| x == *c) {
            let _ = std::fs::write(&control, format!("+{c}"));
        }
    }
}

/// Removes a cgroup and the empty cgroups below it, deepest first. Cgroup directories
/// are removed with rmdir (their files are the kernel's, not to be unlinked).
fn remove_tree(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        // On a cgroup filesystem rmdir ignores the control files (a cgroup still in use
        // answers EBUSY); ENOTEMPTY means a plain directory (tests): remove its files too.
        Err(e) if e.raw_os_error() == Some(39) => std::fs::remove_dir_all(dir),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn tempdir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("wasmlet-cgroupfs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    fn read(path: PathBuf) -> String {
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn v1_writes_each_controllers_files_in_its_hierarchy() {
        let root = tempdir("v1");
        for c in ["cpu", "memory", "pids", "cpuset", "hugetlb"] {
            std::fs::create_dir_all(root.join(c)).expect("mkdir");
        }
        let fs = CgroupFs::at(&root, false);
        let settings = Settings {
            cpu_shares: Some(512),
            cpu_quota: Some(Max::Of(50_000)),
            memory: Some(Max::Of(64 << 20)),
            pids: Some(Max::Unlimited),
            hugetlb: vec![("2MB".into(), 4 << 20)],
            cpuset: None,
        };
        fs.apply("/kubepods/burstable/poda", &settings)
            .expect("apply");
        let dir = |c: &str| root.join(c).join("kubepods/burstable/poda");
        assert_eq!(read(dir("cpu").join("cpu.shares")), "512");
        assert_eq!(read(dir("cpu").join("cpu.cfs_period_us")), "100000");
        assert_eq!(read(dir("cpu").join("cpu.cfs_quota_us")), "50000");
        assert_eq!(
            read(dir("memory").join("memory.limit_in_bytes")),
            (64u64 << 20).to_string()
        );
        assert_eq!(read(dir("pids").join("pids.max")), "max");
        assert_eq!(
            read(dir("hugetlb").join("hugetlb.2MB.limit_in_bytes")),
            (4u64 << 20).to_string()
        );
        assert!(
            !dir("cpuset").exists(),
            "runc makes the path where it needs it"
        );
        fs.write(
            "/kubepods/burstable/poda",
            &Settings {
                cpu_quota: Some(Max::Unlimited),
                memory: Some(Max::Unlimited),
                ..Settings::default()
            },
        )
        .expect("write");
        assert_eq!(read(dir("cpu").join("cpu.cfs_quota_us")), "-1");
        assert_eq!(read(dir("memory").join("memory.limit_in_bytes")), "-1");
        assert_eq!(read(dir("cpu").join("cpu.shares")), "512", "left as it was");
        std::fs::create_dir_all(root.join("cpuset/kubepods/burstable/poda/c1")).expect("mkdir");
        assert_eq!(fs.children("/kubepods/burstable"), ["poda"]);
        assert!(fs.remove("/kubepods/burstable/poda").is_empty());
        assert!(fs.children("/kubepods/burstable").is_empty());
        assert!(root.join("cpu/kubepods/burstable").is_dir());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn v2_enables_controllers_down_the_path_and_writes_the_unified_files() {
        let root = tempdir("v2");
        // The root's controllers as a Debian 12 VM's kernel (6.1) lists them.
        std::fs::write(
            root.join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .expect("write");
        let fs = CgroupFs::detect(&root).expect("v2");
        assert!(fs.v2());
        // The kernel makes these files in each cgroup; a plain directory has none.
        let pod = root.join("kubepods/podg");
        std::fs::create_dir_all(&pod).expect("pod dir");
        std::fs::write(pod.join("hugetlb.2MB.rsvd.max"), "max").expect("rsvd");
        let settings = Settings {
            cpu_shares: Some(1024),
            cpu_quota: Some(Max::Unlimited),
            memory: Some(Max::Of(1 << 30)),
            pids: Some(Max::Of(100)),
            hugetlb: vec![("2MB".into(), 0), ("1GB".into(), 0)],
            cpuset: None,
        };
        fs.apply("/kubepods/podg", &settings).expect("apply");
        let pod = root.join("kubepods/podg");
        assert_eq!(read(pod.join("cpu.weight")), "39");
        assert_eq!(read(pod.join("cpu.max")), "max 100000");
        assert_eq!(read(pod.join("memory.max")), (1u64 << 30).to_string());
        assert_eq!(read(pod.join("pids.max")), "100");
        assert_eq!(read(pod.join("hugetlb.2MB.max")), "0");
        assert_eq!(read(pod.join("hugetlb.2MB.rsvd.max")), "0");
        assert_eq!(read(pod.join("hugetlb.1GB.max")), "0");
        assert!(
            !pod.join("hugetlb.1GB.rsvd.max").exists(),
            "only what the kernel has"
        );
        // A plain file takes the last write: each offered controller was enabled in
        // turn, at the root and in kubepods (not in the pod: nothing of wasmlet's is
        // below it).
        assert_eq!(read(root.join("cgroup.subtree_control")), "+misc");
        assert_eq!(read(root.join("kubepods/cgroup.subtree_control")), "+misc");
        assert!(!pod.join("cgroup.subtree_control").exists());
        assert!(
            CgroupFs::detect(&root.join("nothing")).is_err(),
            "no hierarchy"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
