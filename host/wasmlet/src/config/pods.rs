//! What the configuration says of pods' surroundings: the cluster's DNS for
//! ClusterFirst pods, and the sysctls allowed beyond the safe set.

use std::net::IpAddr;

use anyhow::{Result, bail};
use wasmlet_agent::agent::ClusterDns;

/// `clusterDNS` (IP addresses) and `clusterDomain` (a DNS name, a trailing dot allowed).
pub(super) fn cluster_dns(servers: Vec<String>, domain: String) -> Result<ClusterDns> {
    for (i, s) in servers.iter().enumerate() {
        if s.parse::<IpAddr>().is_err() {
            bail!("clusterDNS[{i}]: {s:?} is not an IP address");
        }
    }
    let domain = domain.trim_end_matches('.').to_owned();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if !domain.is_empty() && (domain.len() > 253 || !domain.split('.').all(label_ok)) {
        bail!("clusterDomain: {domain:?} is not a DNS domain name");
    }
    Ok(ClusterDns { servers, domain })
}

/// `allowedUnsafeSysctls`: each a sysctl name or `prefix*`, and namespaced (a sysctl
/// that is not would change the node for every pod), as the kubelet insists.
pub(super) fn unsafe_sysctls(list: Vec<String>) -> Result<Vec<String>> {
    for (i, s) in list.iter().enumerate() {
        let name = s.strip_suffix('*').unwrap_or(s);
        let well_formed = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b))
            && !s[..s.len() - 1].contains('*');
        if !well_formed {
            bail!("allowedUnsafeSysctls[{i}]: {s:?} is not a sysctl name or prefix*");
        }
        let namespaced = name.starts_with("net.")
            || name.starts_with("kernel.shm")
            || name.starts_with("kernel.msg")
            || name == "kernel.sem"
            || name.starts_with("fs.mqueue.");
        if !namespaced {
            bail!("allowedUnsafeSysctls[{i}]: {s:?} is not known to be namespaced");
        }
    }
    Ok(list)
}
