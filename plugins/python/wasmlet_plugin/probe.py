"""Writing a probe handler (the ``probe-handler`` world).

::

    from wasmlet_plugin.probe import Handler, success, failure

    class Probe(Handler):
        def probe(self, target):
            return success(f"{target.container_name} is fine")

An exception the handler raises is the outcome ``error`` naming it (the kubelet counts an
errored probe as a failure), not a trap.
"""

# Host names are encoded with the idna codec before they are looked up, and Python
# imports it on first use; the component has no standard library to import from once
# built, so it is imported here, into the snapshot, for `socket` to find.
import encodings.idna  # noqa: F401

from wit_world.exports import Probe as _Probe
from wit_world.exports.probe import (
    Action,
    Action_Custom,
    Action_Exec,
    Action_Grpc,
    Action_HttpGet,
    Action_TcpSocket,
    Outcome,
    Outcome_Error,
    Outcome_Failure,
    Outcome_Success,
    ProbeKind,
    Target,
)
from wit_world.imports import exec as _exec
from wit_world.imports.exec import ExecOutput
from componentize_py_types import Err

from ._errors import report

__all__ = [
    "Action", "Action_Custom", "Action_Exec", "Action_Grpc", "Action_HttpGet",
    "Action_TcpSocket", "ExecError", "ExecOutput", "Handler", "Outcome", "ProbeKind",
    "Target", "custom_args", "error", "exec_sync", "failure", "success",
]


def success(message: str = "") -> Outcome:
    """The container passed (the message is kept)."""
    return Outcome_Success(message)


def failure(why: str) -> Outcome:
    """The container failed the check."""
    return Outcome_Failure(why)


def error(why: str) -> Outcome:
    """The check could not be made."""
    return Outcome_Error(why)


def custom_args(target: Target) -> dict[str, str] | None:
    """A custom probe's arguments, or ``None`` when the action is one of the kubelet's."""
    if isinstance(target.action, Action_Custom):
        return dict(target.action.value)
    return None


class ExecError(Exception):
    """The runtime could not run the command (no grant, the container is gone, time ran out)."""


def exec_sync(command: list[str], timeout_ms: int) -> ExecOutput:
    """Runs ``command`` (argv, no shell) in the probed container; needs the ``exec`` grant."""
    try:
        return _exec.exec_sync(command, timeout_ms)
    except Err as e:
        raise ExecError(str(e.value)) from None


class Handler(_Probe):
    """Subclass this as ``Probe`` and define ``probe(target)``, returning ``success``,
    ``failure`` or ``error``."""

    def probe(self, target: Target) -> Outcome:
        raise NotImplementedError("define probe(self, target) in your Probe class")

    def check(self, target: Target) -> Outcome:
        try:
            return self.probe(target)
        except Exception as e:  # a bug in the handler is its probe's error, not a trap
            return error(report(e))
