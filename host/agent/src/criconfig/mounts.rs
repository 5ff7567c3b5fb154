//! A container's mounts: its volumes (with `subPath` / `subPathExpr` resolved as the
//! kubelet resolves them) and the kubelet-managed `/etc/hosts`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_cri::proto;

use super::{ConfigError, NodeContext, pod_dir};
use crate::pod;

/// Where containers find their hosts file.
pub const ETC_HOSTS: &str = "/etc/hosts";
/// The first line of a hosts file the kubelet wrote for a pod on the pod network.
const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.\n";
/// The first line of a hosts file the kubelet wrote for a pod on the node's network.
const MANAGED_HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

/// Where an emptyDir volume lives on the node.
pub fn empty_dir_path(pod: &k8s::Pod, ctx: &NodeContext, volume: &str) -> PathBuf {
    pod_dir(pod, ctx)
        .join("volumes/kubernetes.io~empty-dir")
        .join(volume)
}

/// `subPathExpr` with `$(VAR)` references replaced from the container's environment,
/// the kubelet's way: a reference to a variable that is unset or empty is an error
/// naming every such variable (`$$` is a literal `$`).
pub fn expand_sub_path(expr: &str, env: &BTreeMap<String, String>) -> Result<String, String> {
    let mut missing = BTreeSet::new();
    let out = wasmlet_plugin_host::convert::expand_with(expr, |name| {
        match env.get(name).filter(|v| !v.is_empty()) {
            Some(v) => Some(v.clone()),
            None => {
                missing.insert(name.to_owned());
                Some(String::new())
            }
        }
    });
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(format!(
            "missing value for {}",
            missing.into_iter().collect::<Vec<_>>().join(", ")
        ))
    }
}

/// The sub path a mount asks for (`subPath`, or `subPathExpr` expanded), checked as the
/// kubelet checks it: relative, and never stepping out with `..`.
fn sub_path(m: &k8s::VolumeMount, env: &BTreeMap<String, String>) -> Result<String, String> {
    let sub = match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
        Some(expr) => expand_sub_path(expr, env)?,
        None => m.sub_path.clone().unwrap_or_default(),
    };
    if sub.starts_with('/') {
        return Err(format!(
            "error SubPath `{sub}` must not be an absolute path"
        ));
    }
    if sub.split('/').any(|p| p == "..") {
        return Err(format!(
            "unable to provision SubPath `{sub}`: must not contain '..'"
        ));
    }
    Ok(sub)
}

/// The host side of volume `v`, creating what must exist (hostPath `DirectoryOrCreate`
/// / `FileOrCreate`; emptyDirs were set up with the pod's other volumes).
fn volume_path(pod: &k8s::Pod, ctx: &NodeContext, v: &k8s::Volume) -> Result<PathBuf, String> {
    if v.empty_dir.is_some() {
        return Ok(empty_dir_path(pod, ctx, &v.name));
    }
    if let Some(hp) = &v.host_path {
        let path = PathBuf::from(&hp.path);
        match hp.type_.as_deref().unwrap_or("") {
            "DirectoryOrCreate" => {
                std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            "FileOrCreate" if !path.exists() => {
                if let Some(parent) = path.parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                std::fs::write(&path, b"").map_err(|e| format!("{}: {e}", path.display()))?;
            }
            "Directory" if !path.is_dir() => {
                return Err(format!(
                    "hostPath type check failed: {} is not a directory",
                    path.display()
                ));
            }
            "File" if !path.is_file() => {
                return Err(format!(
                    "hostPath type check failed: {} is not a file",
                    path.display()
                ));
            }
            _ => {}
        }
        return Ok(path);
    }
    // configMap, secret, downwardAPI, projected: written before the containers start
    // and kept up to date (crate::volumes).
    managed_volume_path(pod, ctx, v).ok_or_else(|| {
        "only emptyDir, hostPath, configMap, secret, downwardAPI and projected volumes are supported on this node".to_owned()
    })
}

/// The container's mounts: its volume mounts, then the pod's managed `/etc/hosts` unless
/// the container mounts its own. `env` is the container's environment (for
/// `subPathExpr`), `pod_ip` the sandbox's address.
pub(super) fn mounts(
    pod: &k8s::Pod,
    c: &k8s::Container,
    ctx: &NodeContext,
    env: &BTreeMap<String, String>,
    pod_ip: &str,
) -> Result<Vec<proto::Mount>, ConfigError> {
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    let mut out = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else {
            return Err(ConfigError::new(format!(
                "volume \"{}\" is not defined in the pod",
                m.name
            )));
        };
        // The sub path first: a bad one is the container's configuration, not a mount
        // failure, and leaves nothing created on the node.
        let sub = sub_path(m, env).map_err(ConfigError::new)?;
        let host = volume_path(pod, ctx, v).map_err(|e| ConfigError {
            message: format!("volume \"{}\": {e}", v.name),
            volume: true,
        })?;
        let host = if sub.is_empty() {
            host
        } else {
            let p = host.join(&sub);
            // A sub path that does not exist yet is made a directory, as the kubelet
            // does, so that the volume's other mounts see it.
            if !p.exists() {
                std::fs::create_dir_all(&p).map_err(|e| {
                    ConfigError::new(format!(
                        "failed to create subPath directory for volumeMount \"{}\" of container \"{}\": {e}",
                        m.name, c.name
                    ))
                })?;
            }
            p
        };
        out.push(proto::Mount {
            container_path: m.mount_path.clone(),
            host_path: host.to_string_lossy().into_owned(),
            readonly: m.read_only.unwrap_or(false),
            propagation: match m.mount_propagation.as_deref() {
                Some("HostToContainer") => proto::MountPropagation::PropagationHostToContainer,
                Some("Bidirectional") => proto::MountPropagation::PropagationBidirectional,
                _ => proto::MountPropagation::PropagationPrivate,
            } as i32,
            ..Default::default()
        });
    }
    let own_hosts = c
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path.trim_end_matches('/') == ETC_HOSTS);
    let host_network = pod::host_network(pod);
    if !own_hosts && (host_network || !pod_ip.is_empty()) {
        let file = write_hosts_file(pod, ctx, pod_ip)?;
        out.push(proto::Mount {
            container_path: ETC_HOSTS.into(),
            host_path: file.to_string_lossy().into_owned(),
            selinux_relabel: true,
            ..Default::default()
        });
    }
    Ok(out)
}

/// The pod's hostname and, with a subdomain, its domain
/// (`<subdomain>.<namespace>.svc.<clusterDomain>`; with no cluster domain it ends in
/// `svc.`), as the kubelet derives them.
pub fn hostname_and_domain(pod: &k8s::Pod, ctx: &NodeContext) -> (String, Option<String>) {
    let spec = pod.spec.as_ref();
    let mut name = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod.metadata.name.clone().unwrap_or_default());
    name.truncate(63);
    let name = name.trim_end_matches(['-', '.']).to_owned();
    let domain = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
        .map(|sub| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            format!("{sub}.{ns}.svc.{}", ctx.cluster_domain)
        });
    (name, domain)
}

/// The longest name the kernel keeps as a hostname (its `nodename` field, 65 bytes with
/// the terminating zero).
const FQDN_MAX: usize = 64;

/// The hostname the pod's sandbox gets: its hostname, or with `setHostnameAsFQDN` and a
/// subdomain its fully qualified name — refused, in the kubelet's words, when longer than
/// the kernel keeps (the sandbox is then not made).
pub fn kernel_hostname(pod: &k8s::Pod, ctx: &NodeContext) -> Result<String, String> {
    let (name, domain) = hostname_and_domain(pod, ctx);
    let as_fqdn = pod
        .spec
        .as_ref()
        .and_then(|s| s.set_hostname_as_fqdn)
        .unwrap_or(false);
    match domain {
        Some(domain) if as_fqdn => {
            let fqdn = format!("{name}.{domain}");
            if fqdn.len() > FQDN_MAX {
                return Err(format!(
                    "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({FQDN_MAX} characters is the max, {} characters requested)",
                    fqdn.len()
                ));
            }
            Ok(fqdn)
        }
        _ => Ok(name),
    }
}

fn host_aliases(pod: &k8s::Pod) -> String {
    let aliases = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.as_deref())
        .unwrap_or_default();
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        let names = a.hostnames.as_deref().unwrap_or_default().join("\t");
        out.push_str(&format!("{}\t{names}\n", a.ip));
    }
    out
}

/// The hosts file the kubelet writes for a pod: for the pod network the localhost
/// lines, the pod's address with its names and the `hostAliases`; for the node's network
/// the node's own file (`ctx.hosts_file`) with the `hostAliases` after it.
pub fn hosts_file_content(
    pod: &k8s::Pod,
    ctx: &NodeContext,
    pod_ip: &str,
) -> Result<String, String> {
    let mut out = String::new();
    if pod::host_network(pod) {
        let node = std::fs::read_to_string(&ctx.hosts_file)
            .map_err(|e| format!("{}: {e}", ctx.hosts_file.display()))?;
        out.push_str(MANAGED_HEADER_HOST_NETWORK);
        out.push_str(&node);
    } else {
        out.push_str(MANAGED_HEADER);
        out.push_str("127.0.0.1\tlocalhost\n");
        out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\n");
        out.push_str("fe00::0\tip6-mcastprefix\n");
        out.push_str("fe00::1\tip6-allnodes\n");
        out.push_str("fe00::2\tip6-allrouters\n");
        let (name, domain) = hostname_and_domain(pod, ctx);
        match domain {
            Some(d) => out.push_str(&format!("{pod_ip}\t{name}.{d}\t{name}\n")),
            None => out.push_str(&format!("{pod_ip}\t{name}\n")),
        }
    }
    out.push_str(&host_aliases(pod));
    Ok(out)
}

/// Where the pod's managed hosts file is kept.
fn hosts_file_path(pod: &k8s::Pod, ctx: &NodeContext) -> PathBuf {
    pod_dir(pod, ctx).join("etc-hosts")
}

fn write_hosts_file(
    pod: &k8s::Pod,
    ctx: &NodeContext,
    pod_ip: &str,
) -> Result<PathBuf, ConfigError> {
    let path = hosts_file_path(pod, ctx);
    let content = hosts_file_content(pod, ctx, pod_ip)
        .map_err(|e| ConfigError::new(format!("cannot make /etc/hosts: {e}")))?;
    write_if_changed(&path, content.as_bytes())
        .map_err(|e| ConfigError::new(format!("{}: {e}", path.display())))?;
    Ok(path)
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

/// The directory kind (`kubernetes.io~projected`, …) of a volume the volume manager
/// writes (configMap, secret, downwardAPI, projected).
pub fn managed_volume_kind(v: &k8s::Volume) -> Option<&'static str> {
    if v.projected.is_some() {
        Some("kubernetes.io~projected")
    } else if v.config_map.is_some() {
        Some("kubernetes.io~configmap")
    } else if v.secret.is_some() {
        Some("kubernetes.io~secret")
    } else if v.downward_api.is_some() {
        Some("kubernetes.io~downward-api")
    } else {
        None
    }
}

/// Where volume `v` of `pod` is written, if it is of a kind the volume manager writes.
pub fn managed_volume_path(pod: &k8s::Pod, ctx: &NodeContext, v: &k8s::Volume) -> Option<PathBuf> {
    Some(
        super::pod_dir(pod, ctx)
            .join("volumes")
            .join(managed_volume_kind(v)?)
            .join(&v.name),
    )
}
