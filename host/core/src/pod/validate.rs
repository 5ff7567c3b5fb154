//! The checks the API server makes on a pod that matter to a node, with its field
//! errors: a static pod that fails one is refused, naming the field.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1 as k8s;

use super::{CUSTOM_PROBE_PREFIX, custom_probe};

/// A pod that cannot be accepted, with the field at fault (the API server's wording:
/// `spec.containers[1].name: Duplicate value: "web"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidPod {
    /// The field path, e.g. `spec.containers[0].image`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> InvalidPod {
    InvalidPod {
        field: field.into(),
        message: message.into(),
    }
}

fn dns_label_error(value: &str) -> Option<String> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    (!ok).then(|| {
        format!(
            "Invalid value: \"{value}\": a lowercase RFC 1123 label must consist of lower case \
             alphanumeric characters or '-', and must start and end with an alphanumeric \
             character"
        )
    })
}

fn dns_subdomain_error(value: &str) -> Option<String> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|part| dns_label_error(part).is_none());
    (!ok).then(|| {
        format!(
            "Invalid value: \"{value}\": a lowercase RFC 1123 subdomain must consist of lower \
             case alphanumeric characters, '-' or '.', and must start and end with an \
             alphanumeric character"
        )
    })
}

fn validate_probe(
    pod: &k8s::Pod,
    container: &str,
    name: &str,
    probe: Option<&k8s::Probe>,
    field: &str,
) -> Result<(), InvalidPod> {
    let custom = custom_probe(pod, container, name);
    let annotation = || format!("metadata.annotations[{CUSTOM_PROBE_PREFIX}{container}.{name}]");
    if let Some(Err(e)) = &custom {
        return Err(invalid(annotation(), format!("Invalid value: {e}")));
    }
    let Some(p) = probe else {
        if custom.is_some() {
            return Err(invalid(
                annotation(),
                format!("Invalid value: container {container} has no {name}"),
            ));
        }
        return Ok(());
    };
    let handlers = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ]
    .iter()
    .filter(|h| **h)
    .count();
    if handlers != 1 && !(handlers == 0 && custom.is_some()) {
        return Err(invalid(
            field,
            if handlers == 0 {
                "Required value: must specify a handler type"
            } else {
                "Forbidden: may not specify more than 1 handler type"
            },
        ));
    }
    for (name, v) in [
        ("periodSeconds", p.period_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ] {
        if let Some(v) = v
            && v < 1
        {
            return Err(invalid(
                format!("{field}.{name}"),
                format!("Invalid value: {v}: must be greater than or equal to 1"),
            ));
        }
    }
    Ok(())
}

/// A container's name (a DNS label, unique among all the pod's containers) and image
/// (required), at `field`.
fn name_and_image<'a>(
    field: &str,
    name: &'a str,
    image: Option<&str>,
    names: &mut BTreeSet<&'a str>,
) -> Result<(), InvalidPod> {
    if let Some(e) = dns_label_error(name) {
        return Err(invalid(format!("{field}.name"), e));
    }
    if !names.insert(name) {
        return Err(invalid(
            format!("{field}.name"),
            format!("Duplicate value: \"{name}\""),
        ));
    }
    if image.is_none_or(|i| i.trim().is_empty()) {
        return Err(invalid(format!("{field}.image"), "Required value"));
    }
    Ok(())
}

/// The checks the API server makes on a new pod that matter to a node: names, a unique
/// name and an image for every container, valid ports, volumes that exist, one handler
/// per probe. The first problem is returned.
pub fn validate(pod: &k8s::Pod) -> Result<(), InvalidPod> {
    metadata(pod)?;
    let Some(spec) = pod.spec.as_ref() else {
        return Err(invalid("spec", "Required value"));
    };
    if spec.containers.is_empty() {
        return Err(invalid("spec.containers", "Required value"));
    }
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    if !["Always", "OnFailure", "Never"].contains(&policy) {
        return Err(invalid(
            "spec.restartPolicy",
            format!(
                "Unsupported value: \"{policy}\": supported values: \"Always\", \"OnFailure\", \"Never\""
            ),
        ));
    }
    let volumes = volume_names(spec)?;
    let mut names = BTreeSet::new();
    let lists = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("containers", spec.containers.as_slice()),
    ];
    for (list, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            let field = format!("spec.{list}[{i}]");
            name_and_image(&field, &c.name, c.image.as_deref(), &mut names)?;
            ports_and_mounts(&field, c, &volumes)?;
            if list == "containers" {
                for (name, probe) in [
                    ("livenessProbe", c.liveness_probe.as_ref()),
                    ("readinessProbe", c.readiness_probe.as_ref()),
                    ("startupProbe", c.startup_probe.as_ref()),
                ] {
                    validate_probe(pod, &c.name, name, probe, &format!("{field}.{name}"))?;
                }
            }
        }
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let field = format!("spec.ephemeralContainers[{i}]");
        name_and_image(&field, &c.name, c.image.as_deref(), &mut names)?;
        ephemeral(spec, &field, c)?;
    }
    Ok(())
}

/// The pod's name (a DNS subdomain) and namespace (a DNS label).
fn metadata(pod: &k8s::Pod) -> Result<(), InvalidPod> {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    if name.is_empty() {
        return Err(invalid("metadata.name", "Required value: name is required"));
    }
    if let Some(e) = dns_subdomain_error(name) {
        return Err(invalid("metadata.name", e));
    }
    if let Some(ns) = pod.metadata.namespace.as_deref()
        && let Some(e) = dns_label_error(ns)
    {
        return Err(invalid("metadata.namespace", e));
    }
    Ok(())
}

/// The volumes' names: DNS labels, each once.
fn volume_names(spec: &k8s::PodSpec) -> Result<BTreeSet<&str>, InvalidPod> {
    let mut volumes = BTreeSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if let Some(e) = dns_label_error(&v.name) {
            return Err(invalid(format!("spec.volumes[{i}].name"), e));
        }
        if !volumes.insert(v.name.as_str()) {
            return Err(invalid(
                format!("spec.volumes[{i}].name"),
                format!("Duplicate value: \"{}\"", v.name),
            ));
        }
    }
    Ok(volumes)
}

/// A container's ports in range and its mounts of volumes the pod has.
fn ports_and_mounts(
    field: &str,
    c: &k8s::Container,
    volumes: &BTreeSet<&str>,
) -> Result<(), InvalidPod> {
    for (j, p) in c.ports.iter().flatten().enumerate() {
        if !(1..=65535).contains(&p.container_port) {
            return Err(invalid(
                format!("{field}.ports[{j}].containerPort"),
                format!(
                    "Invalid value: {}: must be between 1 and 65535, inclusive",
                    p.container_port
                ),
            ));
        }
        if let Some(h) = p.host_port
            && !(0..=65535).contains(&h)
        {
            return Err(invalid(
                format!("{field}.ports[{j}].hostPort"),
                format!("Invalid value: {h}: must be between 1 and 65535, inclusive"),
            ));
        }
    }
    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
        if !volumes.contains(m.name.as_str()) {
            return Err(invalid(
                format!("{field}.volumeMounts[{j}].name"),
                format!("Not found: \"{}\"", m.name),
            ));
        }
    }
    Ok(())
}

/// What an ephemeral container may not have (ports, probes) and its target, which must
/// be one of the pod's containers.
fn ephemeral(
    spec: &k8s::PodSpec,
    field: &str,
    c: &k8s::EphemeralContainer,
) -> Result<(), InvalidPod> {
    if let Some(target) = c.target_container_name.as_deref().filter(|t| !t.is_empty())
        && !spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .any(|x| x.name == target)
    {
        return Err(invalid(
            format!("{field}.targetContainerName"),
            format!("Not found: \"{target}\""),
        ));
    }
    if c.ports.as_ref().is_some_and(|p| !p.is_empty()) {
        return Err(invalid(
            format!("{field}.ports"),
            "Forbidden: cannot be set for an Ephemeral Container",
        ));
    }
    for (probe, set) in [
        ("livenessProbe", c.liveness_probe.is_some()),
        ("readinessProbe", c.readiness_probe.is_some()),
        ("startupProbe", c.startup_probe.is_some()),
    ] {
        if set {
            return Err(invalid(
                format!("{field}.{probe}"),
                "Forbidden: cannot be set for an Ephemeral Container",
            ));
        }
    }
    Ok(())
}
