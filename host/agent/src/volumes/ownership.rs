//! A pod's `fsGroup` on its volumes, the kubelet's way (SetVolumeOwnership): every file
//! and directory group-owned by the group; group read (and write, unless the volume is
//! read-only) added to each file's mode, group execute and setgid to each directory's,
//! so that files made later belong to the group too. Links are re-owned, never
//! re-moded (a mode on a link would change its target).
//! `fsGroupChangePolicy: OnRootMismatch` skips the walk when the volume's root already
//! has the group and the bits.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use k8s_openapi::api::core::v1 as k8s;

use super::error::{VolumeError, at};

const RW: u32 = 0o660;
const RO: u32 = 0o440;
const EXEC: u32 = 0o110;
const SETGID: u32 = 0o2000;

/// The group a volume is given to, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    /// The pod's `fsGroup`.
    pub gid: u32,
    /// Whether the volume is read-only to the pod (configMap, secret, downwardAPI,
    /// projected): group read only.
    pub read_only: bool,
    /// `fsGroupChangePolicy: OnRootMismatch`.
    pub on_root_mismatch: bool,
}

impl Ownership {
    /// The ownership `pod` asks for (`None` without an `fsGroup`).
    pub fn of(pod: &k8s::Pod, read_only: bool) -> Option<Ownership> {
        let sc = pod.spec.as_ref()?.security_context.as_ref()?;
        Some(Ownership {
            gid: u32::try_from(sc.fs_group?).ok()?,
            read_only,
            on_root_mismatch: sc.fs_group_change_policy.as_deref() == Some("OnRootMismatch"),
        })
    }

    /// Gives the volume at `dir` to the group.
    pub fn apply(&self, dir: &Path) -> Result<(), VolumeError> {
        if self.on_root_mismatch && !self.root_mismatch(dir) {
            return Ok(());
        }
        self.walk(dir)
    }

    fn mask(&self) -> u32 {
        if self.read_only { RO } else { RW }
    }

    /// Whether the root lacks the group, the bits or setgid (or cannot be read).
    fn root_mismatch(&self, dir: &Path) -> bool {
        let Ok(meta) = std::fs::metadata(dir) else {
            return true;
        };
        let want = self.mask() | EXEC;
        !meta.is_dir()
            || meta.gid() != self.gid
            || meta.mode() & want != want
            || meta.mode() & SETGID == 0
    }

    /// Children first, then the directory itself (as the kubelet walks).
    fn walk(&self, path: &Path) -> Result<(), VolumeError> {
        let meta = std::fs::symlink_metadata(path).map_err(at(path))?;
        if meta.is_dir() {
            let entries = std::fs::read_dir(path).map_err(at(path))?;
            for entry in entries.flatten() {
                self.walk(&entry.path())?;
            }
        }
        self.change(path, &meta)
    }

    fn change(&self, path: &Path, meta: &std::fs::Metadata) -> Result<(), VolumeError> {
        std::os::unix::fs::lchown(path, None, Some(self.gid)).map_err(|source| {
            VolumeError::Group {
                path: path.to_owned(),
                gid: self.gid,
                source,
            }
        })?;
        if meta.is_symlink() {
            return Ok(());
        }
        let mut mask = self.mask();
        if meta.is_dir() {
            mask |= SETGID | EXEC;
        }
        let mode = (meta.mode() & 0o7777) | mask;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(at(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).expect("meta").mode() & 0o7777
    }

    #[test]
    fn files_and_directories_go_to_the_group_with_its_bits() {
        let dir = std::env::temp_dir().join(format!("wasmlet-ownership-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).expect("dir");
        std::fs::write(dir.join("sub/f"), "x").expect("file");
        std::fs::set_permissions(dir.join("sub/f"), std::fs::Permissions::from_mode(0o400))
            .expect("chmod");
        std::os::unix::fs::symlink("sub/f", dir.join("link")).expect("link");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let gid = 4321;
        let rw = Ownership {
            gid,
            read_only: false,
            on_root_mismatch: false,
        };
        rw.apply(&dir).expect("apply");
        assert_eq!(std::fs::metadata(dir.join("sub/f")).expect("f").gid(), gid);
        assert_eq!(
            mode(&dir.join("sub/f")),
            0o660,
            "0400 | group and owner read-write"
        );
        assert_eq!(
            mode(&dir.join("sub")),
            0o2775,
            "setgid and group rwx on directories"
        );
        assert_eq!(mode(&dir), 0o2775);
        let link = std::fs::symlink_metadata(dir.join("link")).expect("link");
        assert_eq!(link.gid(), gid, "links are re-owned");

        // Read-only volumes get group read only.
        std::fs::set_permissions(dir.join("sub/f"), std::fs::Permissions::from_mode(0o400))
            .expect("chmod");
        Ownership {
            gid,
            read_only: true,
            on_root_mismatch: false,
        }
        .apply(&dir)
        .expect("ro");
        assert_eq!(mode(&dir.join("sub/f")), 0o440);

        // OnRootMismatch: the root matches, so nothing below is touched.
        std::fs::set_permissions(dir.join("sub/f"), std::fs::Permissions::from_mode(0o400))
            .expect("chmod");
        Ownership {
            gid,
            read_only: false,
            on_root_mismatch: true,
        }
        .apply(&dir)
        .expect("skip");
        assert_eq!(
            mode(&dir.join("sub/f")),
            0o400,
            "skipped: the root already had the group"
        );
        // Another group: the root does not match, the walk runs.
        Ownership {
            gid: gid + 1,
            read_only: false,
            on_root_mismatch: true,
        }
        .apply(&dir)
        .expect("walk");
        assert_eq!(mode(&dir.join("sub/f")), 0o660);
        assert_eq!(
            std::fs::metadata(dir.join("sub/f")).expect("f").gid(),
            gid + 1
        );
    }
}
