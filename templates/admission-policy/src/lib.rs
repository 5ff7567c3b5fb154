//! A wasmlet admission policy: pods outside an exempt namespace must give every
//! container a memory limit. Configure the namespace with `exempt-namespace`.

use wasmlet_plugin_sdk::admission::*;
use wasmlet_plugin_sdk::host;

struct RequireLimits;

impl AdmissionPolicy for RequireLimits {
    fn admit(pod: &Pod, _node: &Node) -> Verdict {
        let exempt = host::config("exempt-namespace").unwrap_or_else(|| "kube-system".into());
        if pod.namespace() == exempt {
            return Verdict::Admit;
        }
        match pod.containers().iter().find(|c| c.limits.memory == 0) {
            Some(c) => reject(
                "MissingMemoryLimit",
                format!("container {} has no memory limit", c.name),
            ),
            None => Verdict::Admit,
        }
    }
}

wasmlet_plugin_sdk::export_admission_policy!(RequireLimits);
