//! `restricted-pods`: an operator's policy the kubelet does not have. Outside the
//! namespaces in the `allowed-namespaces` setting (comma-separated; default
//! `kube-system`), a pod may not run privileged containers nor share the node's PID or
//! IPC namespace. Reason `RestrictedPod`.
//!
//! `hostPID` and `hostIPC` are not in the typed pod, so the policy reads the pod's JSON
//! (`pod.json()`): the host produces it only when a policy asks.

use wasmlet_plugin_sdk::admission::*;
use wasmlet_plugin_sdk::host;

struct RestrictedPods;

impl AdmissionPolicy for RestrictedPods {
    fn admit(pod: &Pod, _node: &Node) -> Verdict {
        let allowed = host::config("allowed-namespaces").unwrap_or_else(|| "kube-system".into());
        let namespace = pod.namespace();
        if allowed.split(',').any(|ns| ns.trim() == namespace) {
            return Verdict::Admit;
        }
        let all = pod.init_containers().iter().chain(pod.containers());
        if let Some(c) = all.into_iter().find(|c| c.privileged) {
            return reject(
                "RestrictedPod",
                format!(
                    "container {} is privileged, which namespace {} does not allow",
                    c.name, namespace
                ),
            );
        }
        let full: serde_json::Value = match serde_json::from_str(&pod.json()) {
            Ok(v) => v,
            Err(e) => return reject("RestrictedPod", format!("unreadable pod JSON: {e}")),
        };
        for field in ["hostPID", "hostIPC"] {
            if full["spec"][field].as_bool() == Some(true) {
                return reject(
                    "RestrictedPod",
                    format!(
                        "spec.{field} is set, which namespace {} does not allow",
                        namespace
                    ),
                );
            }
        }
        Verdict::Admit
    }
}

wasmlet_plugin_sdk::export_admission_policy!(RestrictedPods);
