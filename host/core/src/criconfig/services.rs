//! Service environment variables: `KUBERNETES_SERVICE_HOST` and its kin in every container
//! of a pod, and with `enableServiceLinks` the same for each Service of the pod's
//! namespace — the variables the kubelet makes, in the docker-link forms too. Where the
//! Services come from is the agent's (its `ServiceSource`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;

/// The Services whose variables a pod in `namespace` gets: `kubernetes` of the `default`
/// namespace always, and with `links` every Service of `namespace`; headless Services
/// (no cluster IP) never. By name, as the kubelet keys them.
pub fn for_pod(
    all: &[k8s::Service],
    namespace: &str,
    links: bool,
) -> BTreeMap<String, k8s::Service> {
    let mut out = BTreeMap::new();
    for s in all {
        let ip = s
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ip.as_deref())
            .unwrap_or("");
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let name = s.metadata.name.clone().unwrap_or_default();
        let ns = s.metadata.namespace.as_deref().unwrap_or("");
        if ns == "default" && name == "kubernetes" {
            out.entry(name).or_insert_with(|| s.clone());
        } else if ns == namespace && links {
            out.insert(name, s.clone());
        }
    }
    out
}

fn env_name(s: &str) -> String {
    s.to_uppercase().replace('-', "_")
}

/// The variables of `services`: `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`,
/// `<NAME>_SERVICE_PORT_<PORT>` for named ports, and the docker-link forms
/// (`<NAME>_PORT=tcp://ip:port`, `<NAME>_PORT_<port>_<PROTO>{,_PROTO,_PORT,_ADDR}`).
pub fn env(services: &BTreeMap<String, k8s::Service>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, s) in services {
        let Some(spec) = &s.spec else { continue };
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        let ports = spec.ports.as_deref().unwrap_or_default();
        let prefix = env_name(name);
        out.push((format!("{prefix}_SERVICE_HOST"), ip.clone()));
        if let Some(first) = ports.first() {
            out.push((format!("{prefix}_SERVICE_PORT"), first.port.to_string()));
        }
        for p in ports {
            if let Some(port_name) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((
                    format!("{prefix}_SERVICE_PORT_{}", env_name(port_name)),
                    p.port.to_string(),
                ));
            }
        }
        for (i, p) in ports.iter().enumerate() {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            let lower = protocol.to_lowercase();
            let url = if ip.contains(':') {
                format!("{lower}://[{ip}]:{}", p.port)
            } else {
                format!("{lower}://{ip}:{}", p.port)
            };
            let link = format!("{prefix}_PORT_{}_{}", p.port, protocol.to_uppercase());
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            out.push((link.clone(), url));
            out.push((format!("{link}_PROTO"), lower));
            out.push((format!("{link}_PORT"), p.port.to_string()));
            out.push((format!("{link}_ADDR"), ip.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(ns: &str, name: &str, ip: &str, ports: serde_json::Value) -> k8s::Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": ip, "ports": ports}
        }))
        .expect("service")
    }

    #[test]
    fn the_kubernetes_service_always_and_the_namespaces_with_links() {
        let all = vec![
            service(
                "default",
                "kubernetes",
                "10.96.0.1",
                serde_json::json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
            ),
            service(
                "app",
                "fooservice",
                "10.0.0.11",
                serde_json::json!([{"port": 8765, "protocol": "TCP"}]),
            ),
            service("app", "headless", "None", serde_json::json!([{"port": 1}])),
            service(
                "other",
                "elsewhere",
                "10.0.0.12",
                serde_json::json!([{"port": 2}]),
            ),
        ];
        let without = for_pod(&all, "app", false);
        assert_eq!(without.keys().collect::<Vec<_>>(), ["kubernetes"]);
        let with = for_pod(&all, "app", true);
        assert_eq!(
            with.keys().collect::<Vec<_>>(),
            ["fooservice", "kubernetes"]
        );
        let vars: BTreeMap<String, String> = env(&with).into_iter().collect();
        let expected = [
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
            // What `Pods should contain environment variables for services` looks for.
            ("FOOSERVICE_SERVICE_HOST", "10.0.0.11"),
            ("FOOSERVICE_SERVICE_PORT", "8765"),
            ("FOOSERVICE_PORT", "tcp://10.0.0.11:8765"),
            ("FOOSERVICE_PORT_8765_TCP_PROTO", "tcp"),
            ("FOOSERVICE_PORT_8765_TCP", "tcp://10.0.0.11:8765"),
            ("FOOSERVICE_PORT_8765_TCP_PORT", "8765"),
            ("FOOSERVICE_PORT_8765_TCP_ADDR", "10.0.0.11"),
        ];
        for (k, v) in expected {
            assert_eq!(vars.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert_eq!(vars.len(), expected.len());
    }

    #[test]
    fn dashes_become_underscores_and_udp_is_lower_case_in_urls() {
        let all = vec![service(
            "ns",
            "my-dns",
            "10.0.0.10",
            serde_json::json!([{"name": "dns-udp", "port": 53, "protocol": "UDP"}]),
        )];
        let vars: BTreeMap<String, String> = env(&for_pod(&all, "ns", true)).into_iter().collect();
        assert_eq!(vars["MY_DNS_SERVICE_PORT_DNS_UDP"], "53");
        assert_eq!(vars["MY_DNS_PORT"], "udp://10.0.0.10:53");
        assert_eq!(vars["MY_DNS_PORT_53_UDP_PROTO"], "udp");
    }
}
