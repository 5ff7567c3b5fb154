"""A wasmlet admission policy: pods outside an exempt namespace must give every
container a memory limit. Configure the namespace with `exempt-namespace`."""

from wasmlet_plugin import host
from wasmlet_plugin.admission import Policy, reject


class Admission(Policy):
    def decide(self, pod, node):
        if pod.namespace == host.config("exempt-namespace", "kube-system"):
            return None
        for c in pod.containers:
            if c.limits.memory == 0:
                return reject("MissingMemoryLimit", f"container {c.name} has no memory limit")
        return None
