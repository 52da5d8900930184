"""The pods on this node, as far as the agent needs them: identity, containers and GPU assignment."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from node_agent.oneline import first_line
from scheduler.api import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodInfo:
    uid: str
    name: str
    namespace: str
    node: str | None = None
    # container ID (without the `containerd://` scheme) -> container name
    containers: Mapping[str, str] = field(default_factory=dict)
    assignment: GPUAssignment | None = None
    # Why the assignment annotation could not be used (None when absent or fine).
    assignment_error: str | None = None

    def container_name(self, container_id: str | None) -> str | None:
        return self.containers.get(container_id) if container_id else None


def pod_info(obj: Mapping[str, Any]) -> PodInfo:
    """Build a PodInfo from a pod as a JSON dict (the API's own field names)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    containers: dict[str, str] = {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            cid = cs.get("containerID") or ""
            if cid and cs.get("name"):
                containers[cid.split("://", 1)[-1]] = cs["name"]
    assignment: GPUAssignment | None = None
    error: str | None = None
    raw = (meta.get("annotations") or {}).get(GPU_ASSIGNMENT)
    if raw is not None:
        try:
            assignment = GPUAssignment.from_annotation(raw)
        except ValueError as exc:
            error = str(exc)
    return PodInfo(
        uid=str(meta.get("uid") or ""),
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or "default"),
        node=spec.get("nodeName"),
        containers=containers,
        assignment=assignment,
        assignment_error=error,
    )


class PodSource(Protocol):
    def pods(self) -> dict[str, PodInfo]:
        """Pods on this node by UID."""
        ...

    def refresh(self) -> None:
        """Ask for a fresh read soon (an unknown pod UID appeared)."""
        ...


class StaticPods:
    """A fixed set of pods (for `--pods-file`, demos and tests)."""

    def __init__(self, pods: Iterable[PodInfo] = ()) -> None:
        self._pods = {p.uid: p for p in pods}

    def pods(self) -> dict[str, PodInfo]:
        return dict(self._pods)

    def refresh(self) -> None:
        pass

    def set(self, pods: Iterable[PodInfo]) -> None:
        self._pods = {p.uid: p for p in pods}


class KubePods:
    """Pods on one node, listed through the Kubernetes API with a field selector.

    Listed every `period_s` rather than watched: the agent only needs the pods that run GPU processes,
    and a new one triggers `refresh()` (rate-limited to `min_gap_s`) when an unknown pod UID shows up.
    """

    def __init__(
        self,
        core_api: Any,
        node: str,
        *,
        period_s: float = 10.0,
        min_gap_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = core_api
        self._node = node
        self._period = period_s
        self._min_gap = min_gap_s
        self._clock = clock
        self._pods: dict[str, PodInfo] = {}
        self._listed_at: float | None = None
        self._want_refresh = False

    def refresh(self) -> None:
        self._want_refresh = True

    def pods(self) -> dict[str, PodInfo]:
        now = self._clock()
        age = None if self._listed_at is None else now - self._listed_at
        if age is None or age >= self._period or (self._want_refresh and age >= self._min_gap):
            self._list(now)
        return self._pods

    def _list(self, now: float) -> None:
        self._want_refresh = False
        self._listed_at = now
        try:
            # Raw JSON, not the client's models: cheaper, and one odd pod cannot fail the whole list.
            response = self._api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self._node}", _preload_content=False, _request_timeout=10
            )
            body = json.loads(response.data)
        except Exception as exc:  # keep the last good view; the API may be briefly unreachable
            log.warning("cannot list pods on node %s: %s", self._node, first_line(exc))
            return
        pods = [pod_info(item) for item in body.get("items") or []]
        self._pods = {p.uid: p for p in pods if p.uid}
