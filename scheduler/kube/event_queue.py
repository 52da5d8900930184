"""A thread-safe queue of resource changes, filled by the informers and drained by the scheduling cycle."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class ResourceEvent:
    kind: str  # "Pod", "Node", "Queue", "PodGroup", ... (scheduler/cache/cluster.Kind), "PriorityClass"

    type: EventType
    obj: dict[str, Any]  # the object after the change (its last state for DELETED)
    old: dict[str, Any] | None = None  # the cached object before the change, when there was one

    @property
    def key(self) -> str:
        return object_key(self.obj)


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class EventQueue:
    """Unbounded FIFO; `drain` hands the cycle everything that arrived since the last cycle at once."""

    def __init__(self) -> None:
        self._items: deque[ResourceEvent] = deque()
        self._cond = threading.Condition()

    def put(self, event: ResourceEvent) -> None:
        with self._cond:
            self._items.append(event)
            self._cond.notify_all()

    def drain(self) -> list[ResourceEvent]:
        with self._cond:
            items = list(self._items)
            self._items.clear()
            return items

    def wait(self, timeout: float) -> bool:
        """Block until at least one event is queued or `timeout` passes; True when events are waiting."""
        with self._cond:
            if not self._items:
                self._cond.wait(timeout)
            return bool(self._items)

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)
