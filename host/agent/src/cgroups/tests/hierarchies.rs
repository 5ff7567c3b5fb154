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

/// `kubepods` and the Guaranteed pod's cgroup under `driver`, relative to a hierarchy.
fn paths(driver: Driver) -> (&'static str, &'static str) {
    match driver {
        Driver::Cgroupfs => ("kubepods", "kubepods/podg"),
        Driver::Systemd => ("kubepods.slice", "kubepods.slice/kubepods-podg.slice"),
    }
}

/// Under each driver, the tree and a pod made on a v1 layout (`name`) whose `hugetlb` is
/// `how`: one warning naming the hierarchy, `why` and the limits not applied; nothing
/// made in the hierarchy; the pod's cgroup and its other limits as without it.
async fn skipped_once(name: &str, how: Hugetlb, why: &str) {
    for driver in [Driver::Cgroupfs, Driver::Systemd] {
        let (root, mounted) = v1_with(&format!("{name}-{driver:?}"), how);
        let (cg, warnings) = tree_and_pod(&root, driver).await;
        let (kubepods, pod) = paths(driver);
        let hierarchy = root.join("hugetlb");
        let [w] = warnings.as_slice() else {
            panic!("{driver:?}: one warning, not {warnings:?}");
        };
        let head = format!(
            "cgroup controller hugetlb skipped ({}: {why}",
            hierarchy.display()
        );
        let tail = format!(
            "the huge page limits (2MB) of /{kubepods}, its QoS tiers and every pod are not applied"
        );
        assert!(
            w.starts_with(&head) && w.ends_with(&tail),
            "{driver:?}: {w}"
        );
        let made = std::fs::read_dir(&hierarchy).is_ok_and(|mut d| d.next().is_some());
        assert!(!made, "{driver:?}: nothing made in {}", hierarchy.display());
        assert!(root.join("memory").join(pod).is_dir(), "{driver:?}");
        assert_eq!(cg.pods(), ["g"], "{driver:?}");
        if driver == Driver::Cgroupfs {
            let file = |c: &str, f: &str| read(&root.join(c).join(pod).join(f));
            assert_eq!(file("cpu", "cpu.cfs_quota_us"), "100000");
            assert_eq!(file("pids", "pids.max"), "1024");
        }
        drop(mounted);
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[tokio::test]
async fn a_read_only_hugetlb_hierarchy_is_skipped_with_one_warning_under_both_drivers() {
    skipped_once("ro-hugetlb", Hugetlb::ReadOnly, "Read-only file system").await;
}

#[tokio::test]
async fn a_hugetlb_directory_where_no_cgroup_is_mounted_is_skipped() {
    // systemd's v1 layout: the directory of a controller it could not mount, on the
    // tmpfs at the root (here: a tmpfs on a directory of the tree's own filesystem).
    skipped_once(
        "bare-hugetlb",
        Hugetlb::NotMounted,
        "not a cgroup hierarchy",
    )
    .await;
}

#[tokio::test]
async fn a_v1_layout_without_hugetlb_makes_the_tree_and_says_so_once() {
    skipped_once("no-hugetlb", Hugetlb::Absent, "no such hierarchy").await;
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
