//! `node-ports`: the kubelet's NodePorts check. A pod is refused when a host port one of
//! its containers (or sidecar init containers) asks for is already held on the node:
//! same protocol and port, and the same address or either side bound to every address
//! (`0.0.0.0`, or empty). The rejection is the kubelet's: reason `NodePorts`, message
//! `Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports`.

use wasmlet_plugin_sdk::admission::*;

struct NodePorts;

const WILDCARD: &str = "0.0.0.0";

fn normalize(ip: &str) -> &str {
    if ip.is_empty() { WILDCARD } else { ip }
}

fn conflicts(ip: &str, protocol: Protocol, port: u16, held: &[HostPortInUse]) -> bool {
    held.iter().any(|h| {
        let held_ip = normalize(&h.host_ip);
        h.port == port
            && h.protocol == protocol
            && (ip == WILDCARD || held_ip == WILDCARD || held_ip == ip)
    })
}

impl AdmissionPolicy for NodePorts {
    fn admit(pod: &Pod, node: &Node) -> Verdict {
        let sidecars = pod.init_containers().iter().filter(|c| c.restartable);
        let wanted: Vec<&ContainerPort> = pod
            .containers()
            .iter()
            .chain(sidecars)
            .flat_map(|c| &c.ports)
            .filter(|p| p.host_port.is_some_and(|p| p != 0))
            .collect();
        if wanted.is_empty() {
            // Most pods ask for no host port: no need to fetch the node's.
            return Verdict::Admit;
        }
        let held = node.host_ports_in_use();
        // Two containers of the same pod cannot share a host port either.
        let mut own: Vec<HostPortInUse> = Vec::new();
        for port in wanted {
            let host_port = port.host_port.unwrap_or_default();
            let ip = normalize(&port.host_ip).to_owned();
            let taken = |by: &[HostPortInUse]| conflicts(&ip, port.protocol, host_port, by);
            if taken(held) || taken(&own) {
                return predicate_failed(
                    "NodePorts",
                    "node(s) didn't have free ports for the requested pod ports",
                );
            }
            own.push(HostPortInUse {
                host_ip: ip,
                protocol: port.protocol,
                port: host_port,
            });
        }
        Verdict::Admit
    }
}

wasmlet_plugin_sdk::export_admission_policy!(NodePorts);
