"""The GPUs this node offers and their health, shared by every plugin endpoint.

Health changes bump a version number and wake the ListAndWatch streams, which then re-send their lists.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from node_agent.nvml.facade import DeviceInfo


@dataclass(frozen=True)
class GPUState:
    info: DeviceInfo
    healthy: bool = True
    reason: str | None = None

    @property
    def uuid(self) -> str:
        return self.info.uuid

    @property
    def index(self) -> int:
        return self.info.index


class Inventory:
    def __init__(self, devices: list[DeviceInfo]) -> None:
        self._gpus: dict[int, GPUState] = {d.index: GPUState(d) for d in devices}
        self._by_uuid: dict[str, int] = {d.uuid: d.index for d in devices}
        self._version = 0
        self._closed = False
        self._changed = threading.Condition()

    @property
    def version(self) -> int:
        with self._changed:
            return self._version

    def gpus(self) -> list[GPUState]:
        with self._changed:
            return [self._gpus[i] for i in sorted(self._gpus)]

    def by_uuid(self, uuid: str) -> GPUState | None:
        with self._changed:
            index = self._by_uuid.get(uuid)
            return None if index is None else self._gpus[index]

    def by_index(self, index: int) -> GPUState | None:
        with self._changed:
            return self._gpus.get(index)

    def set_health(self, index: int, healthy: bool, reason: str | None = None) -> bool:
        """Record a GPU's health; returns True (and wakes the streams) when it changed."""
        with self._changed:
            current = self._gpus.get(index)
            if current is None or (current.healthy == healthy and current.reason == reason):
                return False
            self._gpus[index] = replace(current, healthy=healthy, reason=None if healthy else reason)
            self._version += 1
            self._changed.notify_all()
            return True

    @property
    def closed(self) -> bool:
        with self._changed:
            return self._closed

    def close(self) -> None:
        """Release every waiting stream (shutdown)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_for_change(self, seen_version: int, timeout_s: float) -> int:
        """Block until the version differs from `seen_version` or the timeout passes; return the version."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen_version or self._closed, timeout=timeout_s)
            return self._version
