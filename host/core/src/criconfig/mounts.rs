//! A container's mounts: its volumes (with `subPath` / `subPathExpr` resolved as the
//! kubelet resolves them) and the kubelet-managed `/etc/hosts`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_cri_api::proto;

use super::{ConfigError, NodeContext, pod_dir};
use crate::pod;

/// Where containers find their hosts file.
pub const ETC_HOSTS: &str = "/etc/hosts";
/// The first line of a hosts file the kubelet wrote for a pod on the pod network.
const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.\n";
/// The first line of a hosts file the kubelet wrote for a pod on the node's network.
const MANAGED_HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

/// Where an emptyDir volume lives on the node.
pub fn empty_dir_path<C>(pod: &k8s::Pod, ctx: &NodeContext<C>, volume: &str) -> PathBuf {
    pod_dir(pod, ctx)
        .join("volumes/kubernetes.io~empty-dir")
        .join(volume)
}

/// A `subPathExpr` that names variables the container does not have (or has empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("missing value for {}", .0.join(", "))]
pub struct MissingVariables(pub Vec<String>);

/// `subPathExpr` with `$(VAR)` references replaced from the container's environment,
/// the kubelet's way: a reference to a variable that is unset or empty is an error
/// naming every such variable (`$$` is a literal `$`).
pub fn expand_sub_path(
    expr: &str,
    env: &BTreeMap<String, String>,
) -> Result<String, MissingVariables> {
    let mut missing = BTreeSet::new();
    let out =
        crate::expand::expand_with(expr, |name| match env.get(name).filter(|v| !v.is_empty()) {
            Some(v) => Some(v.clone()),
            None => {
                missing.insert(name.to_owned());
                Some(String::new())
            }
        });
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(MissingVariables(missing.into_iter().collect()))
    }
}

/// The sub path a mount asks for (`subPath`, or `subPathExpr` expanded), checked as the
/// kubelet checks it: relative, and never stepping out with `..`.
fn sub_path(m: &k8s::VolumeMount, env: &BTreeMap<String, String>) -> Result<String, String> {
    let sub = match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
        Some(expr) => expand_sub_path(expr, env).map_err(|e| e.to_string())?,
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

/// What a hostPath volume's `type` asks of the node before its mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPathKind {
    /// `DirectoryOrCreate`: made with its parents when missing.
    DirectoryOrCreate,
    /// `FileOrCreate`: an empty file made when missing.
    FileOrCreate,
    /// `Directory`: must be one.
    Directory,
    /// `File`: must be one.
    File,
}

impl HostPathKind {
    fn of(type_: &str) -> Option<Self> {
        Some(match type_ {
            "DirectoryOrCreate" => HostPathKind::DirectoryOrCreate,
            "FileOrCreate" => HostPathKind::FileOrCreate,
            "Directory" => HostPathKind::Directory,
            "File" => HostPathKind::File,
            _ => return None,
        })
    }
}

/// What the node must hold before a container starts, in the order the agent makes
/// them; each names what it is for, so that a failure is reported in the kubelet's
/// words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeFile {
    /// A hostPath volume's path, made or checked as its `type` says (a failure is the
    /// kubelet's `FailedMount`).
    HostPath {
        /// The volume's name.
        volume: String,
        /// The path on the node.
        path: PathBuf,
        /// What its type asks.
        kind: HostPathKind,
    },
    /// A volume's sub path, made a directory when it does not exist, as the kubelet
    /// does, so that the volume's other mounts see it.
    SubPath {
        /// The volume mount's name.
        mount: String,
        /// The container's name.
        container: String,
        /// The path on the node.
        path: PathBuf,
    },
    /// The pod's managed `/etc/hosts`, written unless it already holds the same text.
    Hosts(HostsFile),
    /// The container's termination message file: made empty and writable by whatever
    /// user the container runs as.
    TerminationLog(PathBuf),
}

/// The host side of volume `v`, and what must exist there (hostPath `DirectoryOrCreate`
/// / `FileOrCreate`, `Directory` / `File` checked; emptyDirs were set up with the pod's
/// other volumes).
fn volume_path<C>(
    pod: &k8s::Pod,
    ctx: &NodeContext<C>,
    v: &k8s::Volume,
) -> Result<(PathBuf, Option<NodeFile>), String> {
    if v.empty_dir.is_some() {
        return Ok((empty_dir_path(pod, ctx, &v.name), None));
    }
    if let Some(hp) = &v.host_path {
        let path = PathBuf::from(&hp.path);
        let file =
            HostPathKind::of(hp.type_.as_deref().unwrap_or("")).map(|kind| NodeFile::HostPath {
                volume: v.name.clone(),
                path: path.clone(),
                kind,
            });
        return Ok((path, file));
    }
    // configMap, secret, downwardAPI, projected: written before the containers start
    // and kept up to date (the agent's volume manager).
    managed_volume_path(pod, ctx, v).map(|p| (p, None)).ok_or_else(|| {
        "only emptyDir, hostPath, configMap, secret, downwardAPI and projected volumes are supported on this node".to_owned()
    })
}

/// The container's mounts: its volume mounts, then the pod's managed `/etc/hosts` unless
/// the container mounts its own; with what the node must hold for them. `env` is the
/// container's environment (for `subPathExpr`), `pod_ip` the sandbox's address.
pub(super) fn mounts<C>(
    pod: &k8s::Pod,
    c: &k8s::Container,
    ctx: &NodeContext<C>,
    env: &BTreeMap<String, String>,
    pod_ip: &str,
) -> Result<(Vec<proto::Mount>, Vec<NodeFile>), ConfigError> {
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    let mut out = Vec::new();
    let mut files = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else {
            return Err(ConfigError::new(format!(
                "volume \"{}\" is not defined in the pod",
                m.name
            )));
        };
        // The sub path first: a bad one is the container's configuration, not a mount
        // failure.
        let sub = sub_path(m, env).map_err(ConfigError::new)?;
        let (host, file) = volume_path(pod, ctx, v).map_err(|e| ConfigError {
            message: format!("volume \"{}\": {e}", v.name),
            volume: true,
        })?;
        files.extend(file);
        let host = if sub.is_empty() {
            host
        } else {
            let path = host.join(&sub);
            files.push(NodeFile::SubPath {
                mount: m.name.clone(),
                container: c.name.clone(),
                path: path.clone(),
            });
            path
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
        let hosts = hosts_file(pod, ctx, pod_ip);
        out.push(proto::Mount {
            container_path: ETC_HOSTS.into(),
            host_path: hosts.path.to_string_lossy().into_owned(),
            selinux_relabel: true,
            ..Default::default()
        });
        files.push(NodeFile::Hosts(hosts));
    }
    Ok((out, files))
}

/// The pod's hostname and, with a subdomain, its domain
/// (`<subdomain>.<namespace>.svc.<clusterDomain>`; with no cluster domain it ends in
/// `svc.`), as the kubelet derives them.
pub fn hostname_and_domain<C>(pod: &k8s::Pod, ctx: &NodeContext<C>) -> (String, Option<String>) {
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

/// A fully qualified hostname longer than the kernel keeps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({FQDN_MAX} characters is the max, {} characters requested)",
    fqdn.len()
)]
pub struct FqdnTooLong {
    /// The name asked for.
    pub fqdn: String,
}

/// The hostname the pod's sandbox gets: its hostname, or with `setHostnameAsFQDN` and a
/// subdomain its fully qualified name — refused, in the kubelet's words, when longer than
/// the kernel keeps (the sandbox is then not made).
pub fn kernel_hostname<C>(pod: &k8s::Pod, ctx: &NodeContext<C>) -> Result<String, FqdnTooLong> {
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
                return Err(FqdnTooLong { fqdn });
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
/// the node's own file with the `hostAliases` after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostsFile {
    /// Where the pod's copy is kept (`<pod dir>/etc-hosts`).
    pub path: PathBuf,
    /// What comes first.
    pub head: String,
    /// The node's hosts file, whose text follows the head (a pod on the node's network).
    pub node_file: Option<PathBuf>,
    /// What comes last: the `hostAliases`.
    pub tail: String,
}

impl HostsFile {
    /// The file's text, `node` being the node's hosts file's (when it has one).
    pub fn content(&self, node: &str) -> String {
        let node = if self.node_file.is_some() { node } else { "" };
        [self.head.as_str(), node, self.tail.as_str()].concat()
    }
}

/// The managed hosts file of `pod` with address `pod_ip`.
pub fn hosts_file<C>(pod: &k8s::Pod, ctx: &NodeContext<C>, pod_ip: &str) -> HostsFile {
    let path = pod_dir(pod, ctx).join("etc-hosts");
    let tail = host_aliases(pod);
    if pod::host_network(pod) {
        return HostsFile {
            path,
            head: MANAGED_HEADER_HOST_NETWORK.into(),
            node_file: Some(ctx.hosts_file.clone()),
            tail,
        };
    }
    let mut head = String::from(MANAGED_HEADER);
    head.push_str("127.0.0.1\tlocalhost\n");
    head.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    head.push_str("fe00::0\tip6-localnet\n");
    head.push_str("fe00::0\tip6-mcastprefix\n");
    head.push_str("fe00::1\tip6-allnodes\n");
    head.push_str("fe00::2\tip6-allrouters\n");
    let (name, domain) = hostname_and_domain(pod, ctx);
    match domain {
        Some(d) => head.push_str(&format!("{pod_ip}\t{name}.{d}\t{name}\n")),
        None => head.push_str(&format!("{pod_ip}\t{name}\n")),
    }
    HostsFile {
        path,
        head,
        node_file: None,
        tail,
    }
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
pub fn managed_volume_path<C>(
    pod: &k8s::Pod,
    ctx: &NodeContext<C>,
    v: &k8s::Volume,
) -> Option<PathBuf> {
    Some(
        pod_dir(pod, ctx)
            .join("volumes")
            .join(managed_volume_kind(v)?)
            .join(&v.name),
    )
}
