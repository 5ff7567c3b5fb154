//! Pod-level cgroups, as the kubelet makes them with the cgroupfs driver: every pod's
//! sandbox and containers run under one cgroup of the pod's own (`/wasmlet/pod<uid>`,
//! given to the runtime as the sandbox's `cgroup_parent`), where limits that hold for
//! the pod as a whole are set — `podPidsLimit` today.
//!
//! The runtime (runc) creates the cgroup path in every hierarchy it uses and its own
//! container cgroups below; wasmlet creates the pod's cgroup first where it sets a limit
//! (the `pids` hierarchy on cgroup v1; the one tree on v2) and removes the pod's cgroups
//! in every hierarchy once its sandboxes are gone. Both cgroup v1 (one mount per
//! controller under the root) and v2 (`cgroup.controllers` at the root) are handled.

use std::io;
use std::path::{Path, PathBuf};

pub mod tree;
pub mod values;

/// The cgroup root wasmlet's pod cgroups go under.
pub const DEFAULT_PARENT: &str = "wasmlet";

/// The node's pod cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCgroups {
    /// Where the cgroup filesystem is mounted (`/sys/fs/cgroup`).
    root: PathBuf,
    /// Unified hierarchy (cgroup v2).
    v2: bool,
    /// The name of the cgroup all pods go under (`wasmlet`).
    parent: String,
    /// `podPidsLimit`: the most processes a pod may have; `None` for no limit.
    pids_limit: Option<u64>,
}

impl PodCgroups {
    /// Pod cgroups under `<root>/…/<parent>`, or why there can be none here (no cgroup
    /// filesystem at `root`, or not allowed to make cgroups in it): the parent cgroup
    /// is made to find out.
    pub fn detect(root: &Path, parent: &str, pids_limit: Option<u64>) -> Result<Self, String> {
        let v2 = root.join("cgroup.controllers").is_file();
        let hierarchy = if v2 {
            root.to_path_buf()
        } else {
            root.join("pids")
        };
        if !hierarchy.is_dir() {
            return Err(format!(
                "no cgroup hierarchy with pids at {}",
                hierarchy.display()
            ));
        }
        let parent = parent.trim_matches('/').to_owned();
        let made = hierarchy.join(&parent);
        std::fs::create_dir_all(&made)
            .map_err(|e| format!("cannot make the cgroup {}: {e}", made.display()))?;
        Ok(PodCgroups {
            root: root.to_path_buf(),
            v2,
            parent,
            pids_limit,
        })
    }

    /// For tests: pod cgroups under `root` laid out as v1 or v2, whoever runs them.
    pub fn at(root: &Path, v2: bool, parent: &str, pids_limit: Option<u64>) -> Self {
        PodCgroups {
            root: root.to_path_buf(),
            v2,
            parent: parent.to_owned(),
            pids_limit,
        }
    }

    /// The cgroup every pod cgroup is made under (cgroupfs form: `/wasmlet`).
    pub fn root_cgroup(&self) -> String {
        format!("/{}", self.parent)
    }

    /// The sandbox's `cgroup_parent` for pod `uid` (cgroupfs form: `/wasmlet/pod<uid>`).
    pub fn cgroup_parent(&self, uid: &str) -> String {
        format!("/{}/pod{uid}", self.parent)
    }

    /// The pod's cgroup directory where its limits are written.
    fn limit_dir(&self, uid: &str) -> PathBuf {
        let base = if self.v2 {
            self.root.clone()
        } else {
            self.root.join("pids")
        };
        base.join(&self.parent).join(format!("pod{uid}"))
    }

    /// Creates pod `uid`'s cgroup with its limits (before its sandbox is created).
    /// Idempotent; a limit already set is written again.
    pub fn ensure(&self, uid: &str) -> io::Result<()> {
        let dir = self.limit_dir(uid);
        if self.v2 {
            // Controllers must be enabled down the path for `pids.max` to exist.
            let parent = self.root.join(&self.parent);
            std::fs::create_dir_all(&parent)?;
            enable_pids(&self.root);
            enable_pids(&parent);
        }
        std::fs::create_dir_all(&dir)?;
        let max = self
            .pids_limit
            .map_or_else(|| "max".to_owned(), |n| n.to_string());
        std::fs::write(dir.join("pids.max"), max).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("writing {}: {e}", dir.join("pids.max").display()),
            )
        })
    }

    /// Removes pod `uid`'s cgroups in every hierarchy (after its sandboxes are
    /// removed). What still holds processes or children stays; returns what was left.
    pub fn remove(&self, uid: &str) -> Vec<PathBuf> {
        let name = format!("pod{uid}");
        let mut left = Vec::new();
        for base in self.hierarchies() {
            let dir = base.join(&self.parent).join(&name);
            match remove_tree(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::debug!(cgroup = %dir.display(), error = %e, "pod cgroup not removed");
                    left.push(dir);
                }
            }
        }
        left
    }

    /// The UIDs of the pods that have a cgroup here (for housekeeping).
    pub fn pods(&self) -> Vec<String> {
        let mut uids: Vec<String> = self
            .hierarchies()
            .into_iter()
            .filter_map(|base| std::fs::read_dir(base.join(&self.parent)).ok())
            .flatten()
            .flatten()
            // The directory entry's own type: no stat of each (this runs every
            // housekeeping pass, over every hierarchy and pod).
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("pod"))
                    .map(str::to_owned)
            })
            .collect();
        uids.sort();
        uids.dedup();
        uids
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
}

/// Enables the pids controller for the children of a v2 cgroup (best effort: it may be
/// on already, or not offered, in which case creating `pids.max` fails and says so).
fn enable_pids(dir: &Path) {
    let control = dir.join("cgroup.subtree_control");
    let on = std::fs::read_to_string(&control)
        .map(|s| s.split_whitespace().any(|c| c == "pids"))
        .unwrap_or(false);
    if !on {
        let _ = std::fs::write(&control, "+pids");
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

    fn tempdir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("wasmlet-cgroups-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    #[test]
    fn v1_limits_pids_in_the_pids_hierarchy_and_removes_the_pod_everywhere() {
        let root = tempdir("v1");
        for c in ["pids", "memory", "cpu"] {
            std::fs::create_dir_all(root.join(c)).expect("mkdir");
        }
        let cg = PodCgroups::at(&root, false, "wasmlet", Some(1024));
        assert_eq!(cg.cgroup_parent("abc"), "/wasmlet/podabc");
        cg.ensure("abc").expect("ensure");
        let max = std::fs::read_to_string(root.join("pids/wasmlet/podabc/pids.max"));
        assert_eq!(max.expect("pids.max"), "1024");
        // The runtime made the pod's cgroup (and a container's) in the other hierarchies.
        std::fs::create_dir_all(root.join("memory/wasmlet/podabc/c1")).expect("mkdir");
        std::fs::create_dir_all(root.join("memory/wasmlet/podother")).expect("mkdir");
        assert_eq!(cg.pods(), ["abc", "other"]);
        assert!(cg.remove("abc").is_empty());
        assert!(!root.join("pids/wasmlet/podabc").exists());
        assert!(!root.join("memory/wasmlet/podabc").exists());
        assert!(root.join("memory/wasmlet/podother").exists());
        assert_eq!(cg.pods(), ["other"]);
        // Removing again is fine.
        assert!(cg.remove("abc").is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn v2_enables_pids_down_the_path_and_no_limit_is_max() {
        let root = tempdir("v2");
        std::fs::write(root.join("cgroup.controllers"), "cpu memory pids").expect("write");
        std::fs::write(root.join("cgroup.subtree_control"), "").expect("write");
        let cg = PodCgroups::at(&root, true, "wasmlet", None);
        cg.ensure("u1").expect("ensure");
        assert_eq!(
            std::fs::read_to_string(root.join("wasmlet/podu1/pids.max")).expect("max"),
            "max"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("cgroup.subtree_control")).expect("control"),
            "+pids"
        );
        assert_eq!(cg.pods(), ["u1"]);
        assert!(cg.remove("u1").is_empty());
        assert!(cg.pods().is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }
}
