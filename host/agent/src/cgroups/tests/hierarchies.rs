//! An optional controller the node does not let the agent write — a v1 hierarchy that is
//! read-only, absent, or a bare directory where no cgroup is mounted (systemd's v1
//! layout leaves one on its read-only tmpfs for a controller it could not mount) — is
//! skipped with one warning naming it and its limits, under both drivers, as the kubelet
//! starts there; a writable one gets its limits as before.
//!
//! The mounts are real (a read-only bind mount, a tmpfs) in a temporary tree, so these
//! tests need root, as the suite does; each is taken down when its test ends.

use rustix::mount::{MountFlags, UnmountFlags};

use super::systemd_bus::connected;
use super::*;

/// A mount in a test's temporary tree, unmounted (detached) when dropped.
struct Mounted(PathBuf);

impl Mounted {
    /// `dir` bound over itself, then made read-only.
    fn read_only(dir: &Path) -> Mounted {
        rustix::mount::mount_bind(dir, dir).unwrap_or_else(|e| {
            panic!(
                "bind mount of {} (the suite runs as root): {e}",
                dir.display()
            )
        });
        let mounted = Mounted(dir.to_owned());
        rustix::mount::mount_remount(dir, MountFlags::BIND | MountFlags::RDONLY, c"")
            .unwrap_or_else(|e| panic!("read-only remount of {}: {e}", dir.display()));
        mounted
    }

    /// A filesystem of another kind than the tree's on `dir` (a tmpfs; a ramfs where
    /// the tree is on a tmpfs itself).
    fn other_filesystem(dir: &Path) -> Mounted {
        const TMPFS_MAGIC: i64 = 0x0102_1994;
        let tree = rustix::fs::statfs(dir).expect("statfs");
        let kind = if tree.f_type as i64 == TMPFS_MAGIC {
            "ramfs"
        } else {
            "tmpfs"
        };
        rustix::mount::mount(kind, dir, kind, MountFlags::empty(), c"").unwrap_or_else(|e| {
            panic!("{kind} on {} (the suite runs as root): {e}", dir.display())
        });
        Mounted(dir.to_owned())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, UnmountFlags::DETACH);
    }
}

/// How the v1 layout's `hugetlb` is.
#[derive(Clone, Copy, Debug)]
enum Hugetlb {
    Writable,
    ReadOnly,
    Absent,
    NotMounted,
}

/// A v1 layout at a temporary `name` with `hugetlb` as `how` (and the mount that makes
/// it so, kept while the test runs).
fn v1_with(name: &str, how: Hugetlb) -> (PathBuf, Option<Mounted>) {
    let root = v1_root(name);
    let dir = root.join("hugetlb");
    let mounted = match how {
        Hugetlb::Absent => None,
        Hugetlb::Writable => {
            std::fs::create_dir(&dir).expect("mkdir");
            None
        }
        Hugetlb::ReadOnly => {
            std::fs::create_dir(&dir).expect("mkdir");
            Some(Mounted::read_only(&dir))
        }
        Hugetlb::NotMounted => {
            std::fs::create_dir(&dir).expect("mkdir");
            Some(Mounted::other_filesystem(&dir))
        }
    };
    (root, mounted)
}

/// The tree of [`setup`] under `driver` (the systemd driver through the stand-in for
/// systemd's manager) on `root`, a Guaranteed pod's cgroup made in it, and the warnings
/// the start gave.
async fn tree_and_pod(root: &Path, driver: Driver) -> (PodCgroups, Vec<String>) {
    let server;
    let systemd = match driver {
        Driver::Systemd => {
            let calls = Arc::default();
            let (systemd, end) = connected(root, &calls).await;
            server = Some(end);
            Some(systemd)
        }
        Driver::Cgroupfs => {
            server = None;
            None
        }
    };
    let cg = PodCgroups::with(CgroupFs::at(root, false), setup(driver), systemd)
        .await
        .unwrap_or_else(|e| panic!("{driver:?}: the tree is made: {e}"));
    cg.ensure(&pod("g", "{limits: {cpu: '1', memory: 128Mi}}"))
        .await
        .unwrap_or_else(|e| panic!("{driver:?}: the pod's cgroup is made: {e}"));
    drop(server);
    let warnings = cg.skipped_limits(&setup(driver));
    (cg, warnings)
}

/// The pod's path under `driver` in `controller`'s hierarchy, and the tree's.
fn paths(driver: Driver) -> (&'static str, &'static str) {
    match driver {
        Driver::Cgroupfs => ("kubepods", "kubepods/podg"),
        Driver::Systemd => ("kubepods.slice", "kubepods.slice/kubepods-podg.slice"),
    }
}

#[tokio::test]
async fn a_read_only_hugetlb_hierarchy_is_skipped_with_one_warning_under_both_drivers() {
    for driver in [Driver::Cgroupfs, Driver::Systemd] {
        let (root, mounted) = v1_with(&format!("ro-hugetlb-{driver:?}"), Hugetlb::ReadOnly);
        let (cg, warnings) = tree_and_pod(&root, driver).await;
        let (kubepods, pod) = paths(driver);
        assert_eq!(warnings.len(), 1, "{driver:?}: {warnings:?}");
        let w = &warnings[0];
        assert!(
            w.starts_with("cgroup controller hugetlb skipped (")
                && w.contains(&root.join("hugetlb").display().to_string())
                && w.contains("Read-only file system")
                && w.contains(&format!("the huge page limits (2MB) of /{kubepods}")),
            "{driver:?}: {w}"
        );
        assert!(
            std::fs::read_dir(root.join("hugetlb"))
                .expect("hugetlb")
                .next()
                .is_none(),
            "{driver:?}: nothing made in the read-only hierarchy"
        );
        if driver == Driver::Cgroupfs {
            // The rest of the pod's limits, as without the hierarchy.
            let dir = root.join("cpu").join(pod);
            assert_eq!(read(&dir.join("cpu.cfs_quota_us")), "100000");
            assert_eq!(read(&root.join("pids").join(pod).join("pids.max")), "1024");
        }
        assert!(root.join("memory").join(pod).is_dir(), "{driver:?}");
        assert_eq!(cg.pods(), ["g"]);
        drop(mounted);
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[tokio::test]
async fn a_hugetlb_directory_where_no_cgroup_is_mounted_is_skipped() {
    // systemd's v1 layout: the directory of a controller it could not mount, on the
    // tmpfs at the root (here: a tmpfs on a directory of the tree's own filesystem).
    for driver in [Driver::Cgroupfs, Driver::Systemd] {
        let (root, mounted) = v1_with(&format!("bare-hugetlb-{driver:?}"), Hugetlb::NotMounted);
        let (_cg, warnings) = tree_and_pod(&root, driver).await;
        assert_eq!(warnings.len(), 1, "{driver:?}: {warnings:?}");
        assert!(
            warnings[0].contains("not a cgroup hierarchy"),
            "{driver:?}: {}",
            warnings[0]
        );
        assert!(
            std::fs::read_dir(root.join("hugetlb"))
                .expect("hugetlb")
                .next()
                .is_none(),
            "{driver:?}: nothing written into the bare directory"
        );
        drop(mounted);
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[tokio::test]
async fn a_v1_layout_without_hugetlb_makes_the_tree_and_says_so_once() {
    for driver in [Driver::Cgroupfs, Driver::Systemd] {
        let (root, _) = v1_with(&format!("no-hugetlb-{driver:?}"), Hugetlb::Absent);
        let (cg, warnings) = tree_and_pod(&root, driver).await;
        assert_eq!(warnings.len(), 1, "{driver:?}: {warnings:?}");
        assert!(
            warnings[0].contains("no such hierarchy"),
            "{driver:?}: {}",
            warnings[0]
        );
        assert!(!root.join("hugetlb").exists(), "{driver:?}");
        assert_eq!(cg.pods(), ["g"]);
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[tokio::test]
async fn a_writable_hugetlb_hierarchy_gets_the_limits_under_both_drivers() {
    for driver in [Driver::Cgroupfs, Driver::Systemd] {
        let (root, _) = v1_with(&format!("rw-hugetlb-{driver:?}"), Hugetlb::Writable);
        let (_cg, warnings) = tree_and_pod(&root, driver).await;
        assert!(warnings.is_empty(), "{driver:?}: {warnings:?}");
        let (kubepods, pod) = paths(driver);
        let limit = |cgroup: &str| {
            read(
                &root
                    .join("hugetlb")
                    .join(cgroup)
                    .join("hugetlb.2MB.limit_in_bytes"),
            )
        };
        assert_eq!(
            limit(kubepods),
            hugetlb::UNBOUNDED.to_string(),
            "{driver:?}"
        );
        assert_eq!(limit(pod), "0", "{driver:?}: no huge pages asked for");
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[tokio::test]
async fn a_read_only_pids_hierarchy_leaves_the_pid_limits_unapplied_under_cgroupfs() {
    let root = v1_root("ro-pids");
    std::fs::create_dir(root.join("hugetlb")).expect("mkdir");
    let mounted = Mounted::read_only(&root.join("pids"));
    let (cg, warnings) = tree_and_pod(&root, Driver::Cgroupfs).await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("cgroup controller pids skipped (")
            && warnings[0].contains("podPidsLimit and the pid limit of /kubepods are not applied"),
        "{}",
        warnings[0]
    );
    assert_eq!(
        read(&root.join("cpu/kubepods/podg/cpu.cfs_quota_us")),
        "100000"
    );
    assert_eq!(cg.pods(), ["g"]);
    drop(mounted);
    let _ = std::fs::remove_dir_all(&root);
}
