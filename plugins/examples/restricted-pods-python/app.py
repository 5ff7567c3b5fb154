"""`restricted-pods` in Python, deciding as the Rust version does: outside the
namespaces in the `allowed-namespaces` setting (comma-separated; default `kube-system`),
a pod may not run privileged containers nor share the node's PID or IPC namespace.
Reason `RestrictedPod`."""

from wasmlet_plugin import host
from wasmlet_plugin.admission import Policy, reject


class Admission(Policy):
    def decide(self, pod, node):
        allowed = host.config("allowed-namespaces", "kube-system")
        namespace = pod.namespace
        if any(ns.strip() == namespace for ns in allowed.split(",")):
            return None
        for c in pod.all_containers:
            if c.privileged:
                return reject(
                    "RestrictedPod",
                    f"container {c.name} is privileged, which namespace {namespace} does not allow",
                )
        spec = pod.object.get("spec", {})
        for field in ("hostPID", "hostIPC"):
            if spec.get(field) is True:
                return reject(
                    "RestrictedPod",
                    f"spec.{field} is set, which namespace {namespace} does not allow",
                )
        return None
