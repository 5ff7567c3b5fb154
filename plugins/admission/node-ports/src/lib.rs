//! `node-ports`: the kubelet's NodePorts check. A pod is refused when a host port one of
//! its containers (or sidecar init containers) asks for is already held on the node:
//! same protocol and port, and the same address or either side bound to every address
//! (`0.0.0.0`, or empty). The rejection is the kubelet's: reason `NodePorts`, message
//! `Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports`.

use wasmlet_plugin_sdk::admission::*;

struct NodePorts;

const WILDCARD: &str = "0.0.0.0";

fn normalize(ip: &str, protocol: &str) -> (String, String) {
    let ip = if ip.is_empty() { WILDCARD } else { ip };
    let protocol = if protocol.is_empty() { "TCP" } else { protocol };
    (ip.to_owned(), protocol.to_owned())
}

fn conflicts(wanted: (&str, &str, u16), held: &[HostPortInUse]) -> bool {
    let (ip, protocol, port) = wanted;
    held.iter().any(|h| {
        let (h_ip, h_protocol) = normalize(&h.host_ip, &h.protocol);
        h.port == port
            && h_protocol == protocol
            && (ip == WILDCARD || h_ip == WILDCARD || h_ip == ip)
    })
}

impl AdmissionPolicy for NodePorts {
    fn admit(pod: Pod, _node: Node, usage: NodeUsage) -> Verdict {
        let sidecars = pod.init_containers.iter().filter(|c| c.restartable);
        let mut taken = usage.host_ports;
        for port in pod.containers.iter().chain(sidecars).flat_map(|c| &c.ports) {
            let Some(host_port) = port.host_port.filter(|p| *p != 0) else {
                continue;
            };
            let (ip, protocol) = normalize(&port.host_ip, &port.protocol);
            if conflicts((&ip, &protocol, host_port), &taken) {
                return predicate_failed(
                    "NodePorts",
                    "node(s) didn't have free ports for the requested pod ports",
                );
            }
            // Two containers of the same pod cannot share a host port either.
            taken.push(HostPortInUse {
                host_ip: ip,
                protocol,
                port: host_port,
            });
        }
        Verdict::Admit
    }
}

wasmlet_plugin_sdk::export_admission_policy!(NodePorts);
