//! `sysctls`: the kubelet's sysctl admission check. A pod may set, in
//! `spec.securityContext.sysctls`, the safe sysctls (namespaced, isolated from the other
//! pods: `kernel.shm_rmid_forced`, `net.ipv4.ip_local_port_range`,
//! `net.ipv4.ip_local_reserved_ports`, `net.ipv4.ip_unprivileged_port_start`,
//! `net.ipv4.tcp_syncookies`, `net.ipv4.ping_group_range`) and the ones the
//! `allowed-unsafe-sysctls` setting names (comma-separated; a trailing `*` is a prefix,
//! as the kubelet's `allowedUnsafeSysctls`). A network sysctl is refused on a pod on the
//! node's network, an IPC one on a pod sharing the node's IPC namespace. The rejection is
//! the kubelet's: reason `SysctlForbidden`, message `forbidden sysctl: "kernel.msgmax"
//! not allowlisted`.
//!
//! Sysctls are not in the typed pod; the policy reads the pod's JSON only when it has
//! some (a substring test first: most pods set none).

use wasmlet_plugin_sdk::admission::*;
use wasmlet_plugin_sdk::host;

struct Sysctls;

const REASON: &str = "SysctlForbidden";

/// The kubelet's safe set.
const SAFE: [&str; 6] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
];

/// The namespace a sysctl belongs to, if it is namespaced (the kubelet's table).
fn namespace(name: &str) -> Option<&'static str> {
    if name == "kernel.sem"
        || name.starts_with("kernel.shm")
        || name.starts_with("kernel.msg")
        || name.starts_with("fs.mqueue.")
    {
        Some("ipc")
    } else if name.starts_with("net.") {
        Some("net")
    } else {
        None
    }
}

/// `a/b.c/d` → `a.b/c.d`: a name written with slashes, as the kubelet reads it.
fn dotted(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '/' => '.',
                '.' => '/',
                c => c,
            })
            .collect(),
        _ => name.to_owned(),
    }
}

/// Why `name` may not be set, or `None` when it may.
fn check(name: &str, allowed: &[String], host_network: bool, host_ipc: bool) -> Option<String> {
    let name = dotted(name);
    let listed = SAFE.contains(&name.as_str())
        || allowed.iter().any(|a| match a.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => *a == name,
        });
    if !listed {
        return Some(format!("{name:?} not allowlisted"));
    }
    match namespace(&name) {
        Some("net") if host_network => Some(format!("{name:?} not allowed with host net enabled")),
        Some("ipc") if host_ipc => Some(format!("{name:?} not allowed with host ipc enabled")),
        _ => None,
    }
}

impl AdmissionPolicy for Sysctls {
    fn admit(pod: &Pod, _node: &Node) -> Verdict {
        let json = pod.json();
        if !json.contains("\"sysctls\"") {
            return Verdict::Admit;
        }
        let full: serde_json::Value = match serde_json::from_str(&json) {
            Ok(v) => v,
            Err(e) => return reject(REASON, format!("unreadable pod JSON: {e}")),
        };
        let Some(sysctls) = full["spec"]["securityContext"]["sysctls"].as_array() else {
            return Verdict::Admit;
        };
        let allowed: Vec<String> = host::config("allowed-unsafe-sysctls")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        let host_network = full["spec"]["hostNetwork"].as_bool() == Some(true);
        let host_ipc = full["spec"]["hostIPC"].as_bool() == Some(true);
        for s in sysctls {
            let name = s["name"].as_str().unwrap_or("");
            if let Some(why) = check(name, &allowed, host_network, host_ipc) {
                return reject(REASON, format!("forbidden sysctl: {why}"));
            }
        }
        Verdict::Admit
    }
}

wasmlet_plugin_sdk::export_admission_policy!(Sysctls);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_safe_set_the_allowed_ones_and_the_shared_namespaces() {
        let none: Vec<String> = Vec::new();
        assert_eq!(check("kernel.shm_rmid_forced", &none, false, false), None);
        assert_eq!(
            check("kernel.msgmax", &none, false, false).as_deref(),
            Some("\"kernel.msgmax\" not allowlisted")
        );
        let allowed = vec!["kernel.msg*".to_string(), "net.core.somaxconn".to_string()];
        assert_eq!(check("kernel.msgmax", &allowed, false, false), None);
        assert_eq!(check("net.core.somaxconn", &allowed, false, false), None);
        assert_eq!(
            check("net.ipv4.tcp_syncookies", &none, true, false).as_deref(),
            Some("\"net.ipv4.tcp_syncookies\" not allowed with host net enabled")
        );
        assert_eq!(
            check("kernel.msgmax", &allowed, false, true).as_deref(),
            Some("\"kernel.msgmax\" not allowed with host ipc enabled")
        );
        assert_eq!(check("net/ipv4/tcp_syncookies", &none, false, false), None);
        assert_eq!(dotted("net/ipv4.conf/eth0"), "net.ipv4/conf.eth0");
    }
}
