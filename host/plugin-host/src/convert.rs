//! From Kubernetes objects (`k8s-openapi`) to the WIT types plugins see, and the node
//! usage the host sums over the active pods.
//!
//! Quantities become integers in the units the kubelet compares them in (millicores,
//! bytes), rounded up as `resource.Quantity` does. Every error names the field it is
//! about (`spec.containers[0].resources.requests.cpu: …`), so a broken manifest is
//! reported where it is broken.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::admission::NodeLoad;
use crate::bindings::wasmlet::plugin::types::{
    Container, ContainerPort, HostPortInUse, Node, NodeSelectorRequirement, NodeSelectorTerm,
    NodeUsage, Pod, Protocol, ResourceList, SelectorOperator, Taint, TaintEffect, Toleration,
    TolerationOperator,
};
use crate::resources;
pub use wasmlet_core::expand::{expand_command, expand_with};
pub use wasmlet_core::quantity::{DurationError, QuantityError, parse_duration, parse_quantity};

/// A field of a Kubernetes object that cannot be turned into the plugin types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConvertError {
    /// The field's path, e.g. `spec.containers[1].ports[0].hostPort`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> ConvertError {
    ConvertError {
        field: field.into(),
        message: message.into(),
    }
}

/// Converts a Kubernetes resource map (`requests`, `limits`, `allocatable`, `overhead`).
pub fn resource_list(
    field: &str,
    map: Option<&BTreeMap<String, Quantity>>,
) -> Result<ResourceList, ConvertError> {
    let mut out = resources::empty();
    for (name, quantity) in map.into_iter().flatten() {
        let at = |e: QuantityError| bad(format!("{field}.{name}"), e.to_string());
        let bytes = || parse_quantity(&quantity.0, 0).map_err(at);
        match name.as_str() {
            "cpu" => out.milli_cpu = parse_quantity(&quantity.0, 3).map_err(at)?,
            "memory" => out.memory = bytes()?,
            "ephemeral-storage" => out.ephemeral_storage = bytes()?,
            "pods" => out.pods = bytes()?,
            _ => out.scalar.push((name.clone(), bytes()?)),
        }
    }
    // BTreeMap iteration already sorted `scalar` by name.
    Ok(out)
}

fn port(field: &str, p: &k8s::ContainerPort) -> Result<ContainerPort, ConvertError> {
    let number = |name: &str, v: i32| {
        u16::try_from(v)
            .ok()
            .filter(|v| *v != 0 || name == "hostPort")
            .ok_or_else(|| {
                bad(
                    format!("{field}.{name}"),
                    format!("{v} is not a port number"),
                )
            })
    };
    Ok(ContainerPort {
        name: p.name.clone(),
        container_port: number("containerPort", p.container_port)?,
        host_port: p
            .host_port
            .map(|v| number("hostPort", v))
            .transpose()?
            .filter(|v| *v != 0),
        host_ip: p.host_ip.clone().unwrap_or_default(),
        protocol: match p.protocol.as_deref() {
            None | Some("TCP") => Protocol::Tcp,
            Some("UDP") => Protocol::Udp,
            Some("SCTP") => Protocol::Sctp,
            Some(other) => {
                return Err(bad(
                    format!("{field}.protocol"),
                    format!("unknown protocol {other:?} (TCP, UDP or SCTP)"),
                ));
            }
        },
    })
}

fn container(field: &str, c: &k8s::Container) -> Result<Container, ConvertError> {
    let resources = c.resources.as_ref();
    let limits = resource_list(
        &format!("{field}.resources.limits"),
        resources.and_then(|r| r.limits.as_ref()),
    )?;
    // API defaulting: a resource with a limit and no request requests its limit.
    let mut requests = resources
        .and_then(|r| r.requests.clone())
        .unwrap_or_default();
    for (name, limit) in resources
        .and_then(|r| r.limits.as_ref())
        .into_iter()
        .flatten()
    {
        requests
            .entry(name.clone())
            .or_insert_with(|| limit.clone());
    }
    Ok(Container {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        requests: resource_list(&format!("{field}.resources.requests"), Some(&requests))?,
        limits,
        ports: c
            .ports
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, p)| port(&format!("{field}.ports[{i}]"), p))
            .collect::<Result<_, _>>()?,
        privileged: c
            .security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false),
        restartable: c.restart_policy.as_deref() == Some("Always"),
    })
}

fn pairs(map: Option<&BTreeMap<String, String>>) -> Vec<(String, String)> {
    map.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn taint_effect(field: &str, effect: &str) -> Result<TaintEffect, ConvertError> {
    match effect {
        "NoSchedule" => Ok(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Ok(TaintEffect::PreferNoSchedule),
        "NoExecute" => Ok(TaintEffect::NoExecute),
        other => Err(bad(field, format!("unknown taint effect {other:?}"))),
    }
}

fn toleration(field: &str, t: &k8s::Toleration) -> Result<Toleration, ConvertError> {
    let operator = match t.operator.as_deref().unwrap_or("Equal") {
        "Equal" | "" => TolerationOperator::Equal,
        "Exists" => TolerationOperator::Exists,
        other => {
            return Err(bad(
                format!("{field}.operator"),
                format!("unknown toleration operator {other:?}"),
            ));
        }
    };
    Ok(Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator,
        value: t.value.clone().unwrap_or_default(),
        effect: match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(taint_effect(&format!("{field}.effect"), e)?),
        },
        toleration_seconds: t.toleration_seconds,
    })
}

fn requirement(
    field: &str,
    r: &k8s::NodeSelectorRequirement,
) -> Result<NodeSelectorRequirement, ConvertError> {
    let operator = match r.operator.as_str() {
        "In" => SelectorOperator::In,
        "NotIn" => SelectorOperator::NotIn,
        "Exists" => SelectorOperator::Exists,
        "DoesNotExist" => SelectorOperator::DoesNotExist,
        "Gt" => SelectorOperator::Gt,
        "Lt" => SelectorOperator::Lt,
        other => {
            return Err(bad(
                format!("{field}.operator"),
                format!("unknown node selector operator {other:?}"),
            ));
        }
    };
    Ok(NodeSelectorRequirement {
        key: r.key.clone(),
        operator,
        values: r.values.clone().unwrap_or_default(),
    })
}

fn requirements(
    field: &str,
    list: Option<&Vec<k8s::NodeSelectorRequirement>>,
) -> Result<Vec<NodeSelectorRequirement>, ConvertError> {
    list.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| requirement(&format!("{field}[{i}]"), r))
        .collect()
}

/// Converts a pod. `source` is the pod source's name; every source but `api` makes a
/// static pod, as in the kubelet.
pub fn pod(p: &k8s::Pod, source: &str) -> Result<Pod, ConvertError> {
    let meta = &p.metadata;
    let spec = p.spec.as_ref().ok_or_else(|| bad("spec", "missing"))?;
    let containers = |name: &str, list: Option<&Vec<k8s::Container>>| {
        list.into_iter()
            .flatten()
            .enumerate()
            .map(|(i, c)| container(&format!("spec.{name}[{i}]"), c))
            .collect::<Result<Vec<_>, _>>()
    };
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    Ok(Pod {
        uid: meta.uid.clone().unwrap_or_default(),
        name: meta
            .name
            .clone()
            .ok_or_else(|| bad("metadata.name", "missing"))?,
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        labels: pairs(meta.labels.as_ref()),
        annotations: pairs(meta.annotations.as_ref()),
        containers: containers("containers", Some(&spec.containers))?,
        init_containers: containers("initContainers", spec.init_containers.as_ref())?,
        overhead: resource_list("spec.overhead", spec.overhead.as_ref())?,
        node_selector: pairs(spec.node_selector.as_ref()),
        required_node_affinity: required
            .map(|r| &r.node_selector_terms)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| {
                let at = format!("{base}.nodeSelectorTerms[{i}]");
                Ok(NodeSelectorTerm {
                    match_expressions: requirements(
                        &format!("{at}.matchExpressions"),
                        t.match_expressions.as_ref(),
                    )?,
                    match_fields: requirements(
                        &format!("{at}.matchFields"),
                        t.match_fields.as_ref(),
                    )?,
                })
            })
            .collect::<Result<_, ConvertError>>()?,
        tolerations: spec
            .tolerations
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| toleration(&format!("spec.tolerations[{i}]"), t))
            .collect::<Result<_, _>>()?,
        host_network: spec.host_network.unwrap_or(false),
        priority: spec.priority.unwrap_or(0),
        static_pod: source != "api",
        source: source.into(),
    })
}

/// The pod count a node that states none gets: the kubelet's default `maxPods`.
pub const DEFAULT_MAX_PODS: u64 = 110;

/// Converts a node. Its allocatable resources are `status.allocatable`, or
/// `status.capacity` when a node reports no allocatable; a node that states no pod count
/// gets the kubelet's default, [`DEFAULT_MAX_PODS`] (a kubelet always reports one).
pub fn node(n: &k8s::Node) -> Result<Node, ConvertError> {
    let status = n.status.as_ref();
    let (field, allocatable) = match status.and_then(|s| s.allocatable.as_ref()) {
        Some(a) => ("status.allocatable", Some(a)),
        None => ("status.capacity", status.and_then(|s| s.capacity.as_ref())),
    };
    Ok(Node {
        name: n
            .metadata
            .name
            .clone()
            .ok_or_else(|| bad("metadata.name", "missing"))?,
        labels: pairs(n.metadata.labels.as_ref()),
        taints: n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| {
                Ok(Taint {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: taint_effect(&format!("spec.taints[{i}].effect"), &t.effect)?,
                })
            })
            .collect::<Result<_, ConvertError>>()?,
        allocatable: {
            let mut list = resource_list(field, allocatable)?;
            if !allocatable.is_some_and(|a| a.contains_key("pods")) {
                list.pods = DEFAULT_MAX_PODS;
            }
            list
        },
    })
}

/// What `active` pods hold on the node: their requests summed the kubelet's way, their
/// number, and the host ports their long-running containers bind.
pub fn load<'a>(active: impl IntoIterator<Item = &'a Pod>) -> NodeLoad {
    let mut usage = NodeUsage {
        requested: resources::empty(),
        pod_count: 0,
    };
    let mut host_ports = Vec::new();
    for pod in active {
        usage.pod_count += 1;
        resources::add(&mut usage.requested, &resources::pod_requests(pod));
        for p in resources::long_running(pod).flat_map(|c| &c.ports) {
            if let Some(port) = p.host_port {
                host_ports.push(HostPortInUse {
                    host_ip: if p.host_ip.is_empty() {
                        "0.0.0.0".into()
                    } else {
                        p.host_ip.clone()
                    },
                    protocol: p.protocol,
                    port,
                });
            }
        }
    }
    NodeLoad {
        usage,
        host_ports: host_ports.into(),
    }
}

/// A document of a YAML or JSON text that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("document {document}: {source}")]
pub struct DocumentError {
    /// Which, from 1.
    pub document: usize,
    /// Why.
    pub source: serde_yaml_ng::Error,
}

/// Every object in a YAML or JSON text: one or more documents, each a single object or a
/// `List` (`PodList`, `NodeList`, `v1/List`) whose `items` are taken one by one. Empty
/// documents are skipped.
pub fn documents(text: &str) -> Result<Vec<serde_json::Value>, DocumentError> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value =
            <serde_json::Value as serde::Deserialize>::deserialize(doc).map_err(|source| {
                DocumentError {
                    document: i + 1,
                    source,
                }
            })?;
        match value {
            serde_json::Value::Null => {}
            serde_json::Value::Object(mut map)
                if map
                    .get("kind")
                    .and_then(|k| k.as_str())
                    .is_some_and(|k| k.ends_with("List")) =>
            {
                if let Some(serde_json::Value::Array(items)) = map.remove("items") {
                    out.extend(items);
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// The probe kind a handler is picked by: `httpGet`, `tcpSocket`, `exec` or `grpc`.
pub fn probe_kind(action: &crate::probe::Action) -> &'static str {
    use crate::probe::Action;
    match action {
        Action::Exec(_) => "exec",
        Action::HttpGet(_) => "httpGet",
        Action::TcpSocket(_) => "tcpSocket",
        Action::Grpc(_) => "grpc",
        Action::Custom(_) => "custom",
    }
}

/// A probe's port as the kubelet resolves it: a number, or the name of one of the
/// container's ports.
fn probe_port(
    field: &str,
    port: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    container: &k8s::Container,
) -> Result<u16, ConvertError> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .ok_or_else(|| {
                bad(
                    field,
                    format!("couldn't find port: {name} in container {}", container.name),
                )
            })?,
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| bad(field, format!("invalid port number: {number}")))
}

/// The check a container's probe asks for, as the probe handlers see it: `field` is the
/// probe's path (`spec.containers[0].livenessProbe`) for errors, `pod_ip` the pod's
/// address (the host a probe checks unless it names one). Named ports are resolved
/// against the container's ports; `timeoutSeconds` defaults to 1, as in the API.
pub fn probe_target(
    pod: &k8s::Pod,
    container: &k8s::Container,
    probe: &k8s::Probe,
    kind: crate::probe::ProbeKind,
    pod_ip: &str,
    field: &str,
) -> Result<crate::probe::Target, ConvertError> {
    let action = probe_action(probe, container, field)?;
    let timeout = probe.timeout_seconds.unwrap_or(1);
    if timeout < 1 {
        return Err(bad(
            format!("{field}.timeoutSeconds"),
            format!("must be greater than or equal to 1, got {timeout}"),
        ));
    }
    Ok(crate::probe::Target {
        pod_namespace: pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        pod_name: pod.metadata.name.clone().unwrap_or_default(),
        pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        container_name: container.name.clone(),
        pod_ip: pod_ip.to_owned(),
        kind,
        action,
        timeout_ms: u32::try_from(timeout)
            .unwrap_or(u32::MAX / 1000)
            .saturating_mul(1000),
    })
}

/// The handler a probe names, its ports resolved and its command expanded.
fn probe_action(
    probe: &k8s::Probe,
    container: &k8s::Container,
    field: &str,
) -> Result<crate::probe::Action, ConvertError> {
    use crate::probe::{Action, GrpcAction, HttpGetAction, TcpSocketAction};
    if let Some(exec) = &probe.exec {
        let env: BTreeMap<&str, &str> = container
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.as_str(), e.value.as_deref()?)))
            .collect();
        let command: Vec<String> = exec
            .command
            .iter()
            .flatten()
            .map(|a| expand_command(a, &env))
            .collect();
        if command.is_empty() {
            return Err(bad(format!("{field}.exec.command"), "Required value"));
        }
        return Ok(Action::Exec(command));
    }
    if let Some(get) = &probe.http_get {
        return Ok(Action::HttpGet(HttpGetAction {
            scheme: get.scheme.clone().unwrap_or_else(|| "HTTP".into()),
            host: get.host.clone().unwrap_or_default(),
            port: probe_port(&format!("{field}.httpGet.port"), &get.port, container)?,
            path: get.path.clone().unwrap_or_default(),
            headers: get
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
        }));
    }
    if let Some(tcp) = &probe.tcp_socket {
        return Ok(Action::TcpSocket(TcpSocketAction {
            host: tcp.host.clone().unwrap_or_default(),
            port: probe_port(&format!("{field}.tcpSocket.port"), &tcp.port, container)?,
        }));
    }
    let Some(grpc) = &probe.grpc else {
        return Err(bad(
            field,
            "must specify a handler type (exec, httpGet, tcpSocket or grpc)",
        ));
    };
    let port = u16::try_from(grpc.port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| {
            bad(
                format!("{field}.grpc.port"),
                format!("invalid port number: {}", grpc.port),
            )
        })?;
    Ok(Action::Grpc(GrpcAction {
        host: String::new(),
        port,
        service: grpc.service.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_up_in_the_requested_unit() {
        let cases = [
            ("500m", 3, 500),
            ("2", 3, 2000),
            ("0.5", 3, 500),
            ("1.0001", 3, 1001),
            ("100n", 3, 1),
            ("1e3", 0, 1000),
            ("1E-3", 3, 1),
            ("1Ki", 0, 1024),
            ("1.5Gi", 0, 1536 << 20),
            ("128974848", 0, 128_974_848),
            ("129M", 0, 129_000_000),
            ("123Mi", 0, 123 << 20),
            ("0", 3, 0),
            ("+3", 0, 3),
            ("110", 0, 110),
        ];
        for (text, scale, want) in cases {
            assert_eq!(
                parse_quantity(text, scale),
                Ok(want),
                "{text} at scale {scale}"
            );
        }
        for text in [
            "",
            "abc",
            "1.2.3",
            "5Qi",
            "-1",
            "1e99",
            "99999999999999999999999Ei",
        ] {
            assert!(parse_quantity(text, 0).is_err(), "{text} should be refused");
        }
    }

    #[test]
    fn durations_read_like_kubernetes() {
        use std::time::Duration;
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "1", "s", "1d", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    fn yaml_pod(text: &str) -> Result<Pod, ConvertError> {
        let p: k8s::Pod = serde_yaml_ng::from_str(text).expect("yaml");
        pod(&p, "api")
    }

    #[test]
    fn limits_default_requests_and_fields_are_named_in_errors() {
        let p = yaml_pod(
            "metadata: {name: a}\nspec:\n  containers:\n  - name: c\n    resources:\n      limits: {cpu: 250m, memory: 64Mi}\n      requests: {memory: 32Mi}\n",
        )
        .expect("pod");
        assert_eq!(p.containers[0].requests.milli_cpu, 250);
        assert_eq!(p.containers[0].requests.memory, 32 << 20);
        assert_eq!(p.namespace, "default");

        let e = yaml_pod(
            "metadata: {name: a}\nspec:\n  containers:\n  - name: c\n  - name: d\n    resources:\n      requests: {cpu: lots}\n",
        )
        .expect_err("bad quantity");
        assert_eq!(e.field, "spec.containers[1].resources.requests.cpu");
        assert!(e.message.contains("\"lots\""), "{e}");

        let e = yaml_pod(
            "metadata: {name: a}\nspec:\n  containers:\n  - name: c\n    ports: [{containerPort: 80, hostPort: 70000}]\n",
        )
        .expect_err("bad port");
        assert_eq!(e.field, "spec.containers[0].ports[0].hostPort");
    }

    #[test]
    fn usage_counts_init_containers_the_kubelets_way() {
        // app 100m + sidecar 50m = 150m running; the plain init container needs
        // 300m + the sidecar started before it (50m) = 350m: the pod needs 350m + 10m
        // overhead.
        let p = yaml_pod(
            "metadata: {name: a}\nspec:\n  overhead: {cpu: 10m}\n  initContainers:\n  - name: side\n    restartPolicy: Always\n    resources: {requests: {cpu: 50m}}\n    ports: [{containerPort: 9, hostPort: 9090}]\n  - name: init\n    resources: {requests: {cpu: 300m, memory: 1Mi}}\n  containers:\n  - name: app\n    resources: {requests: {cpu: 100m, memory: 2Mi}}\n",
        )
        .expect("pod");
        let l = load([&p, &p]);
        assert_eq!(l.usage.pod_count, 2);
        assert_eq!(l.usage.requested.milli_cpu, 2 * 360);
        assert_eq!(l.usage.requested.memory, 2 * (2 << 20));
        assert_eq!(l.host_ports.len(), 2);
        assert_eq!(l.host_ports[0].host_ip, "0.0.0.0");
        assert_eq!(l.host_ports[0].protocol, Protocol::Tcp);
    }

    #[test]
    fn a_node_without_a_pod_count_gets_the_kubelets_default() {
        let n: k8s::Node =
            serde_yaml_ng::from_str("metadata: {name: n}\nstatus: {capacity: {cpu: '4'}}\n")
                .expect("node");
        let n = node(&n).expect("node");
        assert_eq!((n.allocatable.milli_cpu, n.allocatable.pods), (4000, 110));
    }

    #[test]
    fn documents_split_streams_and_lists() {
        let text = "kind: Pod\nmetadata: {name: a}\n---\n---\nkind: PodList\nitems:\n- {kind: Pod, metadata: {name: b}}\n- {kind: Pod, metadata: {name: c}}\n";
        let docs = documents(text).expect("docs");
        let names: Vec<_> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(documents("a: [1, 2").is_err());
    }

    #[test]
    fn probes_become_targets_as_the_kubelet_resolves_them() {
        use crate::probe::{Action, ProbeKind};
        let pod: k8s::Pod = serde_yaml_ng::from_str(
            "metadata: {name: web, namespace: shop, uid: u1}\nspec:\n  containers:\n  - name: app\n    image: nginx\n    env: [{name: FILE, value: /tmp/ok}, {name: FROM, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]\n    ports: [{name: http, containerPort: 8080}]\n    livenessProbe: {httpGet: {port: http, path: /healthz, httpHeaders: [{name: X-A, value: b}]}, timeoutSeconds: 3}\n    readinessProbe: {tcpSocket: {port: 9000}}\n    startupProbe: {exec: {command: [cat, $(FILE), $(FROM), $$(FILE)]}}\n  - name: side\n    image: x\n    livenessProbe: {httpGet: {port: metrics}}\n    readinessProbe: {grpc: {port: 50051, service: db}}\n",
        )
        .expect("pod");
        let spec = pod.spec.as_ref().expect("spec");
        let app = &spec.containers[0];
        let target = |c: &k8s::Container, p: Option<&k8s::Probe>, field: &str| {
            probe_target(
                &pod,
                c,
                p.expect("probe"),
                ProbeKind::Liveness,
                "10.88.0.9",
                field,
            )
        };
        let live = target(app, app.liveness_probe.as_ref(), "l").expect("target");
        assert_eq!(live.timeout_ms, 3000);
        assert_eq!(
            (live.pod_namespace.as_str(), live.pod_ip.as_str()),
            ("shop", "10.88.0.9")
        );
        let Action::HttpGet(get) = &live.action else {
            panic!("httpGet")
        };
        assert_eq!(
            (get.scheme.as_str(), get.port, get.path.as_str()),
            ("HTTP", 8080, "/healthz")
        );
        assert_eq!(get.headers, [("X-A".to_owned(), "b".to_owned())]);
        assert_eq!(probe_kind(&live.action), "httpGet");

        let ready = target(app, app.readiness_probe.as_ref(), "r").expect("target");
        assert_eq!(ready.timeout_ms, 1000, "timeoutSeconds defaults to 1");
        assert_eq!(probe_kind(&ready.action), "tcpSocket");

        let start = target(app, app.startup_probe.as_ref(), "s").expect("target");
        assert_eq!(
            start.action,
            Action::Exec(vec![
                "cat".into(),
                "/tmp/ok".into(),
                "$(FROM)".into(),
                "$(FILE)".into()
            ])
        );

        let side = &spec.containers[1];
        let err = target(
            side,
            side.liveness_probe.as_ref(),
            "spec.containers[1].livenessProbe",
        )
        .expect_err("unknown port name");
        assert_eq!(
            err.to_string(),
            "spec.containers[1].livenessProbe.httpGet.port: couldn't find port: metrics in container side"
        );
        let grpc = target(side, side.readiness_probe.as_ref(), "g").expect("target");
        assert_eq!(probe_kind(&grpc.action), "grpc");
    }
}
