"""Writing a pod source (the ``pod-source`` world).

::

    from wasmlet_plugin.source import PodSource, manifest

    class Source(PodSource):
        def pods(self):
            return [manifest("web", {"apiVersion": "v1", "kind": "Pod", ...})]

``pods()`` returns the source's whole desired set: ``manifest(origin, pod)`` for each pod
and ``problem(origin, message)`` for each manifest it had to skip. An exception means the
source could not be read this time: the host keeps the previous set.
"""

import json
from typing import Any, Iterable

from componentize_py_types import Err

from ._errors import report
from wit_world.exports import Source as _Source
from wit_world.exports.source import PodManifest, Problem, Snapshot

__all__ = ["PodManifest", "PodSource", "Problem", "manifest", "problem"]


def manifest(origin: str, pod: dict[str, Any] | str) -> PodManifest:
    """A pod the source wants: a v1 Pod as a dict (or its JSON), with where it came from."""
    return PodManifest(origin, pod if isinstance(pod, str) else json.dumps(pod))


def problem(origin: str, message: str) -> Problem:
    """A manifest the source could not read; the others are unaffected."""
    return Problem(origin, message)


class PodSource(_Source):
    """Subclass this as ``Source`` and define ``pods()``."""

    def pods(self) -> Iterable[PodManifest | Problem]:
        raise NotImplementedError("define pods(self) in your Source class")

    def poll(self) -> Snapshot:
        try:
            items = list(self.pods())
        except Exception as e:
            raise Err(report(e)) from None
        return Snapshot(
            pods=[i for i in items if isinstance(i, PodManifest)],
            problems=[i for i in items if isinstance(i, Problem)],
        )
