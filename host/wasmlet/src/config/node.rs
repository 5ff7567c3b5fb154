//! The node's identity and membership: `nodeName` / `--hostname-override`, `nodeIP`,
//! `nodeLabels`, `registerWithTaints` (with `--cloud-provider=external`'s taint),
//! `kubeReserved` / `systemReserved`, and how the node reaches its API
//! server: `kubeconfig`, `--bootstrap-kubeconfig`, `--cert-dir`, `rotateCertificates`,
//! `serverTLSBootstrap`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::Taint;
use wasmlet_agent::node::Reserved;
use wasmlet_plugin_host::convert::{QuantityError, parse_quantity};

use super::absolute;
use super::file::{File, Quantities};
use super::flags::Invocation;
use super::labels::check_node_labels;

/// The taint a node registers with while an external cloud provider has not yet
/// initialized it (`--cloud-provider=external`).
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// How the agent gets and keeps its credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Certificates {
    /// `--bootstrap-kubeconfig`: the credentials that request the first client
    /// certificate when the kubeconfig is missing or its certificate has expired.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir` (`<rootDir>/pki`): the client and serving certificates.
    pub dir: PathBuf,
    /// `rotateCertificates`: the client certificate is renewed before it expires.
    pub rotate_client: bool,
    /// `serverTLSBootstrap`: the serving certificate is requested from the cluster.
    pub server_bootstrap: bool,
}

/// The node's part of the configuration.
#[derive(Debug, Clone)]
pub(super) struct NodeSection {
    pub node_name: Option<String>,
    pub hostname_override: Option<String>,
    pub node_ip: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub reserved: Reserved,
    pub kubeconfig: Option<PathBuf>,
    pub certificates: Certificates,
}

/// The node's fields, checked.
pub(super) fn section(f: &mut File, inv: &Invocation, root_dir: &Path) -> Result<NodeSection> {
    if let Some(ip) = &f.node_ip {
        ip.parse::<IpAddr>()
            .map_err(|_| anyhow::anyhow!("nodeIP: {ip:?} is not an IP address"))?;
    }
    check_node_labels(&f.node_labels).map_err(|e| anyhow::anyhow!("nodeLabels: {e}"))?;
    let mut taints = std::mem::take(&mut f.register_with_taints);
    check_taints(&taints)?;
    match inv.cloud_provider.as_deref() {
        Some("external") if !taints.iter().any(|t| t.key == UNINITIALIZED_TAINT) => {
            taints.push(Taint {
                key: UNINITIALIZED_TAINT.into(),
                value: Some("true".into()),
                effect: "NoSchedule".into(),
                ..Taint::default()
            });
        }
        None | Some("external") => {}
        Some(other) => bail!(
            "--cloud-provider: {other:?}: wasmlet has no in-tree cloud providers; use \"external\" (a cloud controller manager) or leave it unset"
        ),
    }
    let reserved = reserved("kubeReserved", &f.kube_reserved)?
        .plus(reserved("systemReserved", &f.system_reserved)?);
    let bootstrap_kubeconfig =
        absolute("--bootstrap-kubeconfig", inv.bootstrap_kubeconfig.clone())?;
    let cert_dir = absolute("--cert-dir", inv.cert_dir.clone())?;
    if inv.bootstrap_kubeconfig.is_some() && f.kubeconfig.is_none() {
        bail!(
            "--bootstrap-kubeconfig: needs --kubeconfig (or kubeconfig): where the credentials it obtains are written"
        );
    }
    Ok(NodeSection {
        node_name: f.node_name.take(),
        hostname_override: inv.hostname_override.clone(),
        node_ip: f.node_ip.take(),
        labels: std::mem::take(&mut f.node_labels),
        taints,
        reserved,
        kubeconfig: f.kubeconfig.take(),
        certificates: Certificates {
            bootstrap_kubeconfig,
            dir: cert_dir.unwrap_or_else(|| root_dir.join("pki")),
            rotate_client: f.rotate_certificates,
            server_bootstrap: f.server_tls_bootstrap,
        },
    })
}

fn check_taints(taints: &[Taint]) -> Result<()> {
    for (i, t) in taints.iter().enumerate() {
        if t.key.is_empty() {
            bail!("registerWithTaints[{i}].key: must not be empty");
        }
        if !matches!(
            t.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            bail!(
                "registerWithTaints[{i}].effect: {:?} must be NoSchedule, PreferNoSchedule or NoExecute",
                t.effect
            );
        }
    }
    Ok(())
}

/// A `kubeReserved` / `systemReserved` map.
pub(super) fn reserved(field: &str, map: &Quantities) -> Result<Reserved> {
    let mut r = Reserved::default();
    for (name, value) in map {
        let at = |e: QuantityError| anyhow::anyhow!("{field}.{name}: {e}");
        // A quantity: a string, or a plain number (`cpu: 1`).
        let value = &match value {
            serde_yaml_ng::Value::String(s) => s.clone(),
            serde_yaml_ng::Value::Number(n) => n.to_string(),
            other => bail!("{field}.{name}: {other:?} is not a quantity"),
        };
        match name.as_str() {
            "cpu" => r.cpu_millis = parse_quantity(value, 3).map_err(at)?,
            "memory" => r.memory_bytes = parse_quantity(value, 0).map_err(at)?,
            "ephemeral-storage" => {
                r.ephemeral_storage_bytes = parse_quantity(value, 0).map_err(at)?;
            }
            "pid" => r.pids = parse_quantity(value, 0).map_err(at)?,
            other => bail!(
                "{field}.{other}: not a resource that can be reserved (cpu, memory, ephemeral-storage, pid)"
            ),
        }
    }
    Ok(r)
}
