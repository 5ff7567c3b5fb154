//! Why a volume could not be made, written or taken down.

use std::io;
use std::path::{Path, PathBuf};

/// A volume's files or mounts that could not be made, written or removed; or what it
/// projects that could not be had.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A file or directory of the volume.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Giving a file to the pod's `fsGroup`.
    #[error("{}: setting group {gid}: {source}", path.display())]
    Group {
        /// The file.
        path: PathBuf,
        /// The group.
        gid: u32,
        /// Why.
        source: io::Error,
    },
    /// A path in the volume's payload that the kubelet's rules refuse.
    #[error(transparent)]
    Path(#[from] PathError),
    /// Mounting a memory-backed emptyDir.
    #[error("mounting a tmpfs on {}: {source}", path.display())]
    Mount {
        /// The volume's directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A mount under the pod's directory that would not come down.
    #[error("unmounting {}: {source}", path.display())]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// What the volume projects could not be had from the API server.
    #[error(transparent)]
    Lookup(#[from] crate::lookup::LookupError),
    /// What the volume projects (a ConfigMap, Secret, token or downward field) is not
    /// there: the kubelet's words for it.
    #[error("{0}")]
    Content(String),
}

/// The error of an I/O call on `path`.
pub(crate) fn at(path: &Path) -> impl FnOnce(io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A payload path the kubelet refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// An empty path.
    #[error("a path in the volume is empty")]
    Empty,
    /// An absolute path.
    #[error("{0:?}: must be a relative path")]
    Absolute(String),
    /// Longer than 4096 characters.
    #[error("{0:?}: longer than 4096 characters")]
    TooLong(String),
    /// An element `..`, or one starting with `..` (the writer's own names).
    #[error("{0:?}: must not contain '..' or start an element with '..'")]
    DotDot(String),
}
