//! What a container needs on the node's filesystem, made before it starts: the
//! [`NodeFile`]s its configuration came with, each failure in the kubelet's words.

use std::path::Path;

use k8s_openapi::api::core::v1 as k8s;

use super::{ConfigError, HostPathKind, HostsFile, NodeContext, NodeFile};

/// Makes `files` in order; the first failure stops the rest.
pub fn prepare(files: &[NodeFile]) -> Result<(), ConfigError> {
    files.iter().try_for_each(make)
}

fn make(file: &NodeFile) -> Result<(), ConfigError> {
    match file {
        NodeFile::HostPath { volume, path, kind } => {
            host_path(path, *kind).map_err(|e| ConfigError {
                message: format!("volume \"{volume}\": {e}"),
                volume: true,
            })
        }
        NodeFile::SubPath {
            mount,
            container,
            path,
        } => {
            if path.exists() {
                return Ok(());
            }
            std::fs::create_dir_all(path).map_err(|e| {
                ConfigError::new(format!(
                    "failed to create subPath directory for volumeMount \"{mount}\" of container \"{container}\": {e}"
                ))
            })
        }
        NodeFile::Hosts(hosts) => write_hosts_file(hosts),
        NodeFile::TerminationLog(file) => {
            termination_log(file).map_err(|e| ConfigError::new(format!("{}: {e}", file.display())))
        }
    }
}

/// A hostPath's path made or checked as its type says.
fn host_path(path: &Path, kind: HostPathKind) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("{}: {e}", path.display());
    match kind {
        HostPathKind::DirectoryOrCreate => std::fs::create_dir_all(path).map_err(failed),
        HostPathKind::FileOrCreate if !path.exists() => {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            std::fs::write(path, b"").map_err(failed)
        }
        HostPathKind::Directory if !path.is_dir() => Err(format!(
            "hostPath type check failed: {} is not a directory",
            path.display()
        )),
        HostPathKind::File if !path.is_file() => Err(format!(
            "hostPath type check failed: {} is not a file",
            path.display()
        )),
        _ => Ok(()),
    }
}

/// The text of `pod`'s managed hosts file (reading the node's own for a pod on the
/// node's network).
pub fn hosts_file_content(
    pod: &k8s::Pod,
    ctx: &NodeContext,
    pod_ip: &str,
) -> Result<String, String> {
    hosts_text(&super::hosts_file(pod, ctx, pod_ip))
}

fn hosts_text(hosts: &HostsFile) -> Result<String, String> {
    let node = match &hosts.node_file {
        Some(path) => {
            std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => String::new(),
    };
    Ok(hosts.content(&node))
}

fn write_hosts_file(hosts: &HostsFile) -> Result<(), ConfigError> {
    let content =
        hosts_text(hosts).map_err(|e| ConfigError::new(format!("cannot make /etc/hosts: {e}")))?;
    write_if_changed(&hosts.path, content.as_bytes())
        .map_err(|e| ConfigError::new(format!("{}: {e}", hosts.path.display())))
}

/// Writes `bytes` to `path` unless it already holds them (a container restart leaves
/// the file its siblings have open untouched).
fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, bytes)
}

/// The termination message file, made empty and writable by whatever user the
/// container runs as, as the kubelet makes it.
fn termination_log(file: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Some(dir) = file.parent() else {
        return Ok(());
    };
    std::fs::create_dir_all(dir)?;
    std::fs::write(file, b"")?;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o666))
}
