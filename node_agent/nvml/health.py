"""Which NVML events make a GPU unhealthy.

Shared by the agent's report and the device plugin so both mark the same GPUs unhealthy.
"""

from __future__ import annotations

import threading

from node_agent.nvml.facade import DeviceSample, GPUEvent

# Xids caused by the application, not the GPU (NVIDIA's own device plugin skips the same set by default):
# 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive
# cleanup, 68 video processor exception, 109 context switch timeout.
APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})


def marks_unhealthy(event: GPUEvent) -> bool:
    """True when the event means the GPU itself is broken (critical Xid, double-bit ECC, GPU lost)."""
    if event.kind == "xid":
        return event.code not in APPLICATION_XIDS
    return True


def describe(event: GPUEvent) -> str:
    """A one-line health reason for the report."""
    if event.kind == "xid":
        return f"Xid {event.code}" + (f": {event.message}" if event.message else "")
    if event.kind == "ecc":
        return event.message or "double-bit ECC error"
    return event.message or "GPU is lost"


class HealthLedger:
    """Sticky per-GPU health plus the queue of events not yet returned by `poll_events`.

    A GPU that had a critical Xid, a double-bit ECC error or was lost stays unhealthy until the agent
    restarts (as NVIDIA's device plugin does): such a GPU needs a reset by an operator.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: dict[int, str] = {}
        self._pending: list[GPUEvent] = []

    def push(self, event: GPUEvent) -> None:
        """Queue an event for `poll_events` and mark its GPU unhealthy when it is critical."""
        with self._lock:
            self._pending.append(event)
            if marks_unhealthy(event):
                self._reasons.setdefault(event.index, describe(event))

    def drain(self) -> list[GPUEvent]:
        with self._lock:
            events, self._pending = self._pending, []
            return events

    def reason(self, index: int) -> str | None:
        with self._lock:
            return self._reasons.get(index)

    def apply(self, sample: DeviceSample) -> DeviceSample:
        """Overlay sticky health on a fresh sample; a sample that just met a fatal error emits `lost`."""
        if not sample.healthy:
            with self._lock:
                first_time = sample.index not in self._reasons
            if first_time:
                self.push(GPUEvent(sample.index, "lost", message=sample.health_reason or "GPU is lost"))
        reason = self.reason(sample.index)
        if reason is not None:
            sample.healthy = False
            sample.health_reason = reason
        return sample
