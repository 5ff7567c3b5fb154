//! Writing a volume's files so that a container never sees half an update: the kubelet's
//! layout, which applications that watch their configuration rely on.
//!
//! ```text
//! <volume>/..2024_05_01_10_00_00.123456789/   the files of one version
//! <volume>/..data -> ..2024_05_01_10_00_00.123456789
//! <volume>/<key>  -> ..data/<key>             one link per top-level name
//! ```
//!
//! An update writes a new timestamped directory, points a `..data_tmp` link at it and
//! renames that over `..data` (one atomic step), then adds the links of new names,
//! removes those of names gone, and removes the old directory. A payload equal to what is
//! there writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::error::{PathError, VolumeError, at};
use super::ownership::Ownership;

/// The link to the current version.
pub const DATA_DIR: &str = "..data";
/// The link made beside it and renamed over it.
const DATA_DIR_TMP: &str = "..data_tmp";

/// One file of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    /// Its content.
    pub data: Vec<u8>,
    /// Its mode (permission bits).
    pub mode: u32,
}

/// A volume's files by relative path.
pub type Payload = BTreeMap<String, FileProjection>;

/// Why a payload path is refused (the kubelet's rules): relative, no element `..` or
/// starting with `..` (those names are the writer's own), none empty.
pub fn check_path(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute(path.to_owned()));
    }
    if path.len() > 4096 {
        return Err(PathError::TooLong(path.to_owned()));
    }
    for element in path.split('/') {
        if element.starts_with("..") {
            return Err(PathError::DotDot(path.to_owned()));
        }
    }
    Ok(())
}

/// Writes `payload` into `dir` if it differs from what is there; `true` when it wrote.
/// `owner` is applied to the new version before it becomes visible.
pub fn write(
    dir: &Path,
    payload: &Payload,
    owner: Option<&Ownership>,
) -> Result<bool, VolumeError> {
    let clean: Payload = payload
        .iter()
        .map(|(k, v)| {
            check_path(k)?;
            let k = k
                .split('/')
                .filter(|e| !e.is_empty() && *e != ".")
                .collect::<Vec<_>>()
                .join("/");
            Ok((k, v.clone()))
        })
        .collect::<Result<_, PathError>>()?;
    std::fs::create_dir_all(dir).map_err(at(dir))?;
    let data_link = dir.join(DATA_DIR);
    let old = std::fs::read_link(&data_link).ok();
    if let Some(old) = &old
        && same(&dir.join(old), &clean)
    {
        return Ok(false);
    }
    let version = new_version_dir(dir).map_err(at(dir))?;
    let result = write_version(&version, &clean)
        .and_then(|()| owner.map_or(Ok(()), |o| o.apply(dir)))
        .and_then(|()| swap(dir, &version));
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&version);
        return Err(e);
    }
    let visible: BTreeSet<&str> = clean.keys().filter_map(|k| k.split('/').next()).collect();
    link_visible(dir, &visible)?;
    if let Some(old) = old.filter(|o| o.as_os_str() != version.file_name().unwrap_or_default()) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

/// Whether the version in `version_dir` holds exactly `payload`'s files and contents.
fn same(version_dir: &Path, payload: &Payload) -> bool {
    let mut found = Vec::new();
    if files_under(version_dir, "", &mut found).is_err() || found.len() != payload.len() {
        return false;
    }
    found.iter().all(|rel| {
        payload
            .get(rel)
            .is_some_and(|f| std::fs::read(version_dir.join(rel)).is_ok_and(|d| d == f.data))
    })
}

/// The regular files under `dir`, as paths relative to it.
fn files_under(dir: &Path, prefix: &str, out: &mut Vec<String>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if entry.file_type()?.is_dir() {
            files_under(&entry.path(), &rel, out)?;
        } else {
            out.push(rel);
        }
    }
    Ok(())
}

/// A new, empty `..<UTC timestamp>.<nanos>` directory, mode 0755 whatever the umask.
fn new_version_dir(dir: &Path) -> io::Result<PathBuf> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let stamp = crate::time::rfc3339(i64::try_from(now.as_secs()).unwrap_or(0))
        .trim_end_matches('Z')
        .replace(['-', 'T', ':'], "_");
    let mut nanos = now.subsec_nanos();
    loop {
        let path = dir.join(format!("..{stamp}.{nanos:09}"));
        match std::fs::create_dir(&path) {
            Ok(()) => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
                return Ok(path);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => nanos = nanos.wrapping_add(1),
            Err(e) => return Err(e),
        }
    }
}

fn write_version(version: &Path, payload: &Payload) -> Result<(), VolumeError> {
    for (rel, file) in payload {
        let path = version.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(at(parent))?;
        }
        std::fs::write(&path, &file.data).map_err(at(&path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(file.mode & 0o7777))
            .map_err(at(&path))?;
    }
    Ok(())
}

/// Points `..data` at `version` in one step.
fn swap(dir: &Path, version: &Path) -> Result<(), VolumeError> {
    let tmp = dir.join(DATA_DIR_TMP);
    let _ = std::fs::remove_file(&tmp);
    let name = version.file_name().unwrap_or_default();
    std::os::unix::fs::symlink(name, &tmp).map_err(at(&tmp))?;
    let data = dir.join(DATA_DIR);
    std::fs::rename(&tmp, &data).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        at(&data)(e)
    })
}

/// Makes each visible name a link into `..data` and removes every other name (the
/// writer's own `..` names aside): names gone from the payload, and the plain files of a
/// volume written before this layout.
fn link_visible(dir: &Path, visible: &BTreeSet<&str>) -> Result<(), VolumeError> {
    for name in visible {
        let link = dir.join(name);
        let target = Path::new(DATA_DIR).join(name);
        match std::fs::read_link(&link) {
            Ok(t) if t == target => continue,
            Ok(_) => std::fs::remove_file(&link).map_err(at(&link))?,
            Err(_) if link.is_dir() => std::fs::remove_dir_all(&link).map_err(at(&link))?,
            Err(_) if link.exists() => std::fs::remove_file(&link).map_err(at(&link))?,
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&target, &link).map_err(at(&link))?;
    }
    for entry in std::fs::read_dir(dir).map_err(at(dir))? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || visible.contains(name.as_str()) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(at(&path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(files: &[(&str, &str)]) -> Payload {
        files
            .iter()
            .map(|(k, v)| {
                (
                    (*k).to_owned(),
                    FileProjection {
                        data: v.as_bytes().to_vec(),
                        mode: 0o644,
                    },
                )
            })
            .collect()
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wasmlet-atomic-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn versions(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("..") && n != DATA_DIR)
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_volume_is_versions_behind_one_link_and_only_changes_are_written() {
        let dir = tempdir("layout");
        let first = payload(&[("a", "1"), ("sub/b", "2")]);
        assert!(
            write(&dir, &first, None).expect("first"),
            "a new volume is written"
        );
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).expect(p);
        assert_eq!(read("a"), "1");
        assert_eq!(read("sub/b"), "2");
        assert_eq!(
            std::fs::read_link(dir.join("a")).expect("link"),
            Path::new("..data/a")
        );
        assert_eq!(
            std::fs::read_link(dir.join("sub")).expect("link"),
            Path::new("..data/sub")
        );
        let v1 = versions(&dir);
        assert_eq!(v1.len(), 1, "{v1:?}");
        assert!(v1[0].starts_with("..20"), "timestamped: {v1:?}");
        assert_eq!(
            std::fs::read_link(dir.join(DATA_DIR)).expect("data"),
            Path::new(&v1[0])
        );

        assert!(
            !write(&dir, &first, None).expect("same"),
            "the same payload writes nothing"
        );
        assert_eq!(versions(&dir), v1);

        // A key changed, one gone, one new: a new version, the old one removed.
        let second = payload(&[("a", "10"), ("c", "3")]);
        assert!(write(&dir, &second, None).expect("second"));
        assert_eq!(read("a"), "10");
        assert_eq!(read("c"), "3");
        assert!(!dir.join("sub").exists(), "a name gone is unlinked");
        let v2 = versions(&dir);
        assert_eq!(v2.len(), 1);
        assert_ne!(v2, v1, "the old version is removed");
    }

    #[test]
    fn a_reader_holding_the_old_version_keeps_it_whole() {
        let dir = tempdir("reader");
        write(&dir, &payload(&[("k", "old")]), None).expect("old");
        // Resolve as a reader does at open: through the link to the version.
        let mut file = std::fs::File::open(dir.join("k")).expect("open");
        write(&dir, &payload(&[("k", "new")]), None).expect("new");
        let mut old = String::new();
        std::io::Read::read_to_string(&mut file, &mut old).expect("read");
        assert_eq!(old, "old", "an open file is the version it was opened in");
        assert_eq!(std::fs::read_to_string(dir.join("k")).expect("k"), "new");
    }

    #[test]
    fn plain_files_of_the_layout_before_are_replaced_and_bad_paths_refused() {
        let dir = tempdir("migrate");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("k"), "plain").expect("plain");
        std::fs::write(dir.join("gone"), "plain").expect("plain");
        write(&dir, &payload(&[("k", "v")]), None).expect("write");
        assert!(
            std::fs::symlink_metadata(dir.join("k"))
                .expect("k")
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(dir.join("k")).expect("k"), "v");
        assert!(!dir.join("gone").exists());
        for bad in ["/abs", "../up", "a/..b", "..data", ""] {
            assert!(
                write(&dir, &payload(&[(bad, "x")]), None).is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(dir.join("k")).expect("k"),
            "v",
            "a refused payload leaves the volume"
        );
    }
}
