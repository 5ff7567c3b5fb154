"""Writing an admission policy (the ``admission-policy`` world).

::

    from wasmlet_plugin.admission import Policy, reject

    class Admission(Policy):
        def decide(self, pod, node):
            if any(c.image.endswith(":latest") for c in pod.containers):
                return reject("LatestTag", "a container uses :latest")
            # returning nothing admits the pod

The pod and the node are read field by field: a field the policy never reads is never
copied into it, and one it reads is asked of the host once per decision.
"""

import json
from functools import cached_property
from typing import Any

import wit_world
from wit_world.exports.admission import Rejection, Verdict, Verdict_Admit, Verdict_Reject
from wit_world.imports.admission_input import NodeView, PodView
from wit_world.imports.types import (
    Container,
    ContainerPort,
    HostPortInUse,
    NodeSelectorTerm,
    NodeUsage,
    Protocol,
    ResourceList,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)

__all__ = [
    "ADMIT", "Container", "ContainerPort", "HostPortInUse", "Node", "NodeSelectorTerm",
    "NodeUsage", "Pod", "Policy", "Protocol", "ResourceList", "Taint", "TaintEffect",
    "Toleration", "TolerationOperator", "Verdict", "predicate_failed", "reject",
]

ADMIT: Verdict = Verdict_Admit()
"""The pod may run."""


def reject(reason: str, message: str) -> Verdict:
    """A rejection with a machine ``reason`` (CamelCase) and a human ``message``."""
    return Verdict_Reject(Rejection(reason, message))


def predicate_failed(name: str, description: str) -> Verdict:
    """The kubelet's words when one of its predicates fails: reason ``name``, message
    ``Predicate <name> failed: <description>``."""
    return reject(name, f"Predicate {name} failed: {description}")


class Pod:
    """The pod under admission, for one decision."""

    def __init__(self, view: PodView):
        self._view = view

    @cached_property
    def uid(self) -> str:
        return self._view.uid()

    @cached_property
    def name(self) -> str:
        return self._view.name()

    @cached_property
    def namespace(self) -> str:
        return self._view.namespace()

    @cached_property
    def labels(self) -> dict[str, str]:
        return dict(self._view.labels())

    @cached_property
    def annotations(self) -> dict[str, str]:
        return dict(self._view.annotations())

    @cached_property
    def containers(self) -> list[Container]:
        """``spec.containers``."""
        return self._view.containers()

    @cached_property
    def init_containers(self) -> list[Container]:
        """``spec.initContainers``, sidecars (``restartable``) among them."""
        return self._view.init_containers()

    @property
    def all_containers(self) -> list[Container]:
        """Init containers, then app containers."""
        return self.init_containers + self.containers

    @cached_property
    def overhead(self) -> ResourceList:
        return self._view.overhead()

    @cached_property
    def requests(self) -> ResourceList:
        """What the pod requests, summed the kubelet's way by the host (init containers,
        sidecars, overhead)."""
        return self._view.requests()

    @cached_property
    def node_selector(self) -> dict[str, str]:
        return dict(self._view.node_selector())

    @cached_property
    def required_node_affinity(self) -> list[NodeSelectorTerm]:
        """The required node affinity's terms (ORed); empty when it has none."""
        return self._view.required_node_affinity()

    @cached_property
    def tolerations(self) -> list[Toleration]:
        return self._view.tolerations()

    @cached_property
    def host_network(self) -> bool:
        return self._view.host_network()

    @cached_property
    def priority(self) -> int:
        return self._view.priority()

    @cached_property
    def static_pod(self) -> bool:
        """Whether it comes from a file or URL source, not the API server."""
        return self._view.static_pod()

    @cached_property
    def source(self) -> str:
        """The pod source's name (``file``, ``http``, ``api``)."""
        return self._view.source()

    @cached_property
    def object(self) -> dict[str, Any]:
        """The whole pod as a v1 Pod (decoded JSON), for what the fields above leave out
        (``hostPID``, security contexts, volumes, ...). The host makes it on the first ask."""
        return json.loads(self._view.json())


class Node:
    """The node the pod would join, for one decision."""

    def __init__(self, view: NodeView):
        self._view = view

    @cached_property
    def name(self) -> str:
        return self._view.name()

    @cached_property
    def labels(self) -> dict[str, str]:
        return dict(self._view.labels())

    @cached_property
    def taints(self) -> list[Taint]:
        return self._view.taints()

    @cached_property
    def allocatable(self) -> ResourceList:
        """``status.allocatable``, with ``pods`` = maxPods."""
        return self._view.allocatable()

    @cached_property
    def usage(self) -> NodeUsage:
        """What the node's active pods already request, summed by the host."""
        return self._view.usage()

    @cached_property
    def host_ports_in_use(self) -> list[HostPortInUse]:
        return self._view.host_ports_in_use()


class Policy(wit_world.exports.Admission):
    """Subclass this as ``Admission`` and define ``decide(pod, node)``, returning
    ``ADMIT``, ``reject(...)`` or nothing (admit)."""

    def decide(self, pod: Pod, node: Node) -> Verdict | None:
        raise NotImplementedError("define decide(self, pod, node) in your Admission class")

    def admit(self, pod: PodView, node: NodeView) -> Verdict:
        verdict = self.decide(Pod(pod), Node(node))
        return ADMIT if verdict is None else verdict
