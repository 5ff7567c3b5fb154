//! emptyDir volumes as the kubelet makes them: a directory of mode 0777 under the pod's
//! directory, so that a container of any user can write into it; with `medium: Memory` a
//! tmpfs mounted there, sized by the volume's `sizeLimit` or the pod's memory limit or
//! the node's allocatable memory, the smallest that is set. The pod's `fsGroup` (with its
//! change policy) applies. Set up once: a later sync leaves the volume as the
//! containers left it. [`unmount_all`] takes the tmpfs mounts down when the pod goes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_plugin_host::convert::parse_quantity;

use super::error::{VolumeError, at};
use super::ownership::Ownership;
use crate::criconfig::{NodeContext, empty_dir_path};

/// Makes emptyDir volume `v` of `pod` ready for its containers.
pub fn set_up(pod: &k8s::Pod, ctx: &NodeContext, v: &k8s::Volume) -> Result<(), VolumeError> {
    let Some(spec) = &v.empty_dir else {
        return Ok(());
    };
    let dir = empty_dir_path(pod, ctx, &v.name);
    let memory = spec.medium.as_deref() == Some("Memory");
    if if memory {
        is_mount_point(&dir)
    } else {
        dir.is_dir()
    } {
        return Ok(());
    }
    std::fs::create_dir_all(&dir).map_err(at(&dir))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).map_err(at(&dir))?;
    if memory {
        mount_tmpfs(&dir, tmpfs_size(pod, ctx, spec))?;
    }
    match Ownership::of(pod, false) {
        Some(o) => o.apply(&dir),
        None => Ok(()),
    }
}

/// The size of a memory-backed emptyDir in bytes (`None`: the kernel's default): the
/// node's allocatable memory, lowered to the pod's memory limit, lowered to the volume's
/// `sizeLimit` — each only when it is set, positive and smaller.
pub fn tmpfs_size(
    pod: &k8s::Pod,
    ctx: &NodeContext,
    spec: &k8s::EmptyDirVolumeSource,
) -> Option<u64> {
    let mut size = ctx
        .allocatable
        .get("memory")
        .and_then(|q| parse_quantity(&q.0, 0).ok())
        .filter(|s| *s > 0);
    let lower = |size: Option<u64>, candidate: Option<u64>| match (size, candidate) {
        (Some(s), Some(c)) if c > 0 && c <= s => Some(c),
        (None, Some(c)) if c > 0 => Some(c),
        (s, _) => s,
    };
    size = lower(size, pod_memory_limit(pod));
    let limit = spec
        .size_limit
        .as_ref()
        .and_then(|q| parse_quantity(&q.0, 0).ok());
    lower(size, limit)
}

/// The pod's memory limit as its cgroup gets it: the sum of its containers' limits when
/// each has one, at least the largest init container's, plus the pod's overhead.
pub fn pod_memory_limit(pod: &k8s::Pod) -> Option<u64> {
    let limit = |c: &k8s::Container| {
        c.resources
            .as_ref()?
            .limits
            .as_ref()?
            .get("memory")
            .and_then(|q| parse_quantity(&q.0, 0).ok())
    };
    let mut sum = 0u64;
    for c in wasmlet_core::pod::containers(pod) {
        sum = sum.saturating_add(limit(c)?);
    }
    for c in wasmlet_core::pod::init_containers(pod) {
        sum = sum.max(limit(c)?);
    }
    let overhead = pod
        .spec
        .as_ref()
        .and_then(|s| s.overhead.as_ref())
        .and_then(|o| o.get("memory"))
        .and_then(|q| parse_quantity(&q.0, 0).ok())
        .unwrap_or(0);
    Some(sum.saturating_add(overhead))
}

fn mount_tmpfs(dir: &Path, size: Option<u64>) -> Result<(), VolumeError> {
    // Digits only: no NUL to refuse.
    let options = std::ffi::CString::new(size.map(|s| format!("size={s}")).unwrap_or_default())
        .unwrap_or_default();
    let flags = rustix::mount::MountFlags::empty();
    rustix::mount::mount("tmpfs", dir, "tmpfs", flags, options.as_c_str()).map_err(|e| {
        VolumeError::Mount {
            path: dir.to_owned(),
            source: e.into(),
        }
    })
}

/// Whether `path` is a mount point.
fn is_mount_point(path: &Path) -> bool {
    mount_points().iter().any(|m| m == path)
}

/// This process's mount points (`/proc/self/mountinfo`, octal escapes undone).
fn mount_points() -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape(m)))
        .collect()
}

/// `\040` and the like back to their bytes.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|o| {
            std::str::from_utf8(o)
                .ok()
                .and_then(|o| u8::from_str_radix(o, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmounts every mount under `dir` (deepest first); the paths it could not unmount.
pub fn unmount_all(dir: &Path) -> Vec<(PathBuf, std::io::Error)> {
    let mut under: Vec<PathBuf> = mount_points()
        .into_iter()
        .filter(|m| m.starts_with(dir))
        .collect();
    under.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    under.dedup();
    under
        .into_iter()
        .filter_map(|m| {
            rustix::mount::unmount(&m, rustix::mount::UnmountFlags::empty())
                .err()
                .map(|e| (m, e.into()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> k8s::Pod {
        serde_json::from_value(json).expect("pod")
    }

    fn ctx(memory: &str) -> NodeContext {
        NodeContext {
            allocatable: [(
                "memory".to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(memory.into()),
            )]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_tmpfs_is_sized_by_the_smallest_of_allocatable_the_pods_limit_and_the_volumes() {
        let limited = pod(serde_json::json!({"spec": {
            "initContainers": [{"name": "i", "resources": {"limits": {"memory": "300Mi"}}}],
            "containers": [
                {"name": "a", "resources": {"limits": {"memory": "64Mi"}}},
                {"name": "b", "resources": {"limits": {"memory": "64Mi"}}}],
            "overhead": {"memory": "10Mi"}}}));
        assert_eq!(
            pod_memory_limit(&limited),
            Some(310 << 20),
            "init container's max, plus overhead"
        );
        let volume = |limit: Option<&str>| k8s::EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: limit
                .map(|l| k8s_openapi::apimachinery::pkg::api::resource::Quantity(l.into())),
            ..Default::default()
        };
        assert_eq!(
            tmpfs_size(&limited, &ctx("1Gi"), &volume(None)),
            Some(310 << 20)
        );
        assert_eq!(
            tmpfs_size(&limited, &ctx("1Gi"), &volume(Some("1Mi"))),
            Some(1 << 20)
        );
        assert_eq!(
            tmpfs_size(&limited, &ctx("1Gi"), &volume(Some("2Gi"))),
            Some(310 << 20),
            "a sizeLimit above what the pod may use does not raise it"
        );
        let unlimited = pod(serde_json::json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"memory": "64Mi"}}}, {"name": "b"}]}}));
        assert_eq!(
            pod_memory_limit(&unlimited),
            None,
            "one container without a limit: none"
        );
        assert_eq!(
            tmpfs_size(&unlimited, &ctx("1Gi"), &volume(None)),
            Some(1 << 30),
            "allocatable"
        );
        assert_eq!(
            tmpfs_size(&unlimited, &NodeContext::default(), &volume(None)),
            None
        );
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/var/lib/a\040b"), "/var/lib/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/tail\"), "/tail\\");
    }
}
