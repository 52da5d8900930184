"""A pod as the device plugin needs it: which of its containers ask for which device resource, in the order
the kubelet calls `Allocate` for them, and what the scheduler and the plugin wrote on it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from scheduler.api.allocation import GPUAllocation
from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT

ContainerKind = Literal["init", "sidecar", "app"]
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class ContainerAsk:
    """One container and the device resources it asks for (its limits; requests equal them)."""

    name: str
    kind: ContainerKind
    limits: Mapping[str, int]

    def count(self, resource: str) -> int:
        return self.limits.get(resource, 0)


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str
    node_name: str | None
    annotations: Mapping[str, str] = field(default_factory=dict)
    deleting: bool = False
    phase: str = "Pending"
    # Init containers (sidecars among them) in order, then app containers: the kubelet's Allocate order.
    containers: tuple[ContainerAsk, ...] = ()
    # The kubelet reports container statuses: it has admitted the pod (past Allocate).
    started: bool = False

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL

    def asking(self, resource: str) -> list[ContainerAsk]:
        """Its containers that ask for `resource`, in the kubelet's Allocate order."""
        return [c for c in self.containers if c.count(resource) > 0]

    def asks(self, resource: str) -> bool:
        return any(c.count(resource) > 0 for c in self.containers)

    @property
    def placed(self) -> bool:
        """Placed by the Tessera scheduler: it carries an assignment (only the scheduler may write one)."""
        return GPU_ASSIGNMENT in self.annotations

    def assignment(self) -> GPUAssignment:
        """Its assignment; ValueError (one line) when it is malformed, KeyError when it has none."""
        return GPUAssignment.from_annotation(self.annotations[GPU_ASSIGNMENT])

    def allocation(self) -> GPUAllocation | None:
        """What the device plugin recorded it holds (None: nothing, or unreadable)."""
        raw = self.annotations.get(GPU_ALLOCATED)
        if raw is None:
            return None
        try:
            return GPUAllocation.from_annotation(raw)
        except ValueError:
            return None


def _count(value: Any) -> int:
    """An extended resource's quantity: a whole number (the API server refuses anything else)."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def _limits(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    out = {str(k): _count(v) for k, v in (resources.get("requests") or {}).items() if "/" in str(k)}
    out.update({str(k): _count(v) for k, v in (resources.get("limits") or {}).items() if "/" in str(k)})
    return out


def pod_view(obj: Mapping[str, Any]) -> PodView:
    """A pod as the API returns it (JSON) -> PodView."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    containers: list[ContainerAsk] = []
    for c in spec.get("initContainers") or []:
        kind: ContainerKind = "sidecar" if c.get("restartPolicy") == "Always" else "init"
        containers.append(ContainerAsk(str(c.get("name", "")), kind, _limits(c)))
    for c in spec.get("containers") or []:
        containers.append(ContainerAsk(str(c.get("name", "")), "app", _limits(c)))
    return PodView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        node_name=spec.get("nodeName"),
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        deleting=meta.get("deletionTimestamp") is not None,
        phase=str(status.get("phase") or "Pending"),
        containers=tuple(containers),
        started=bool(status.get("containerStatuses") or status.get("initContainerStatuses")),
    )
