"""The one interface the scheduling loop talks to: a simulated cluster or a real Kubernetes API.

Objects cross it as plain Kubernetes dicts (exactly what the API server or a YAML file holds), so the
simulated and the real cluster go through the same parsing and validation. What an adapter knows of a pod
beyond the object (the PodGroup the podgrouper put it in...) travels beside it, typed (`PodOverlay`),
never written into a copy of the object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from scheduler.api.assignment import GPUAssignment
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.model.reasons import Reason
from scheduler.model.types import PodInfo, PodOverlay

Kind = Literal[
    "Node", "Pod", "Queue", "PodGroup", "GPUNodeReport", "PriorityClass", "Topology", "Namespace",
    "PersistentVolume", "PersistentVolumeClaim", "StorageClass",
]  # fmt: skip


EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class WatchEvent:
    kind: Kind
    type: EventType
    obj: Mapping[str, Any]
    overlay: PodOverlay | None = None  # a pod's: what the adapter adds to the object (parse_pod applies it)


@dataclass(frozen=True)
class BindResult:
    """What a successful bind tells the cycle besides "bound"."""

    # Accepted and carried out by a binder (asynchronous binding): the pod's holding is assumed (ASSUMED in
    # the ledger) until its outcome comes from `Cluster.bind_outcomes`; a version of the pod that still
    # shows it unbound meanwhile is older than the bind (the mirror keeps its place).
    in_flight: bool = False


@dataclass(frozen=True)
class BindOutcome:
    """How a bind that was in flight ended: `error` is None when the pod is bound."""

    uid: str
    error: str | None = None


class BindError(RuntimeError):
    """Binding failed (conflict, pod gone); the pod stays pending and is retried."""


class EvictError(RuntimeError):
    """Eviction refused (e.g. a PodDisruptionBudget); the victim keeps running."""


class Cluster(Protocol):
    def now(self) -> float:
        """Seconds (wall clock or simulated)."""
        ...

    def epoch_s(self) -> float:
        """Now as Unix time, the clock creationTimestamps are read against (simulated in a simulation)."""
        ...

    def drain_events(self) -> list[WatchEvent]:
        """Everything that changed since the last call, oldest first."""
        ...

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> BindResult:
        """Write the assignment on the pod and bind it to `assignment.node` (or accept to, `in_flight`).
        Raises BindError."""
        ...

    def bind_outcomes(self) -> list[BindOutcome]:
        """Binds that were in flight and have ended since the last call, oldest first (always empty for a
        cluster that binds synchronously)."""
        ...

    def evict(
        self, pod: PodInfo, *, action: str, message: str, grace_s: float | None = None, force: bool = False
    ) -> None:
        """Evict a running pod; `message` names the action and the beneficiary. `grace_s`: the grace period
        to delete it with (None: its own). `force`: where a disruption budget refuses, delete it anyway (and
        say so). Raises EvictError."""
        ...

    def report_pending(self, pod: PodInfo, reason: Reason, message: str) -> None:
        """Tell the user why the pod is not running (pod condition + event, rate-limited by the adapter)."""
        ...

    def publish_status(self, queues: Mapping[str, QueueStatus], groups: Mapping[str, PodGroupStatus]) -> None:
        """Write Queue and PodGroup status (keys: queue name; namespace/name of the group)."""
        ...

    def warn(self, kind: str, namespace: str | None, name: str, reason: str, message: str) -> None:
        """Tell the user something is wrong with an object that does not stop scheduling (a queue whose
        parent is missing, a pod naming a missing PodGroup, a node's assumed GPU memory): an Event on
        it in Kubernetes, a line in the simulation's output. Called when the warning first appears or
        its message changes."""
        ...
