//! `nodeLabels` / `--node-labels`: the labels a node may give itself.

use std::collections::BTreeMap;

use anyhow::{Result, bail};

/// Labels under kubernetes.io and k8s.io a node may give itself (the NodeRestriction
/// admission plugin refuses the others; the kubelet checks `--node-labels` the same way).
fn allowed_system_label(key: &str) -> bool {
    const KEYS: &[&str] = &[
        "kubernetes.io/hostname",
        "kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
    ];
    let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
    KEYS.contains(&key)
        || namespace == "kubelet.kubernetes.io"
        || namespace.ends_with(".kubelet.kubernetes.io")
        || namespace == "node.kubernetes.io"
        || namespace.ends_with(".node.kubernetes.io")
}

/// `nodeLabels` / `--node-labels`: valid keys, and no kubernetes.io or k8s.io label the
/// node may not set on itself.
pub fn check_node_labels(labels: &BTreeMap<String, String>) -> Result<()> {
    if let Some(k) = labels.keys().find(|k| k.is_empty() || k.len() > 316) {
        bail!("{k:?} is not a label key");
    }
    let refused: Vec<&str> = labels
        .keys()
        .map(String::as_str)
        .filter(|k| {
            let namespace = k.split_once('/').map_or("", |(ns, _)| ns);
            let system = namespace == "kubernetes.io"
                || namespace.ends_with(".kubernetes.io")
                || namespace == "k8s.io"
                || namespace.ends_with(".k8s.io");
            system && !allowed_system_label(k)
        })
        .collect();
    if !refused.is_empty() {
        bail!(
            "unknown 'kubernetes.io' or 'k8s.io' labels: {refused:?} (a node may set only kubelet.kubernetes.io/*, node.kubernetes.io/* and the well-known topology, OS and arch labels)"
        );
    }
    Ok(())
}
