"""Keeps the inventory's GPU health current from NVML: Xid/ECC/lost events at once, samples periodically.

A GPU marked unhealthy by a critical event stays unhealthy until the plugin restarts (as NVIDIA's device
plugin does): it needs an operator's reset. Which events count is shared with the node agent
(`node_agent.nvml.health`), so the report and the kubelet agree.
"""

from __future__ import annotations

import logging
import threading
import time

from device_plugin.inventory import Inventory
from node_agent.nvml.facade import GPUEvent, NVMLBackend
from node_agent.nvml.health import describe, marks_unhealthy

log = logging.getLogger(__name__)


class HealthMonitor:
    def __init__(
        self,
        backend: NVMLBackend,
        inventory: Inventory,
        *,
        sample_interval_s: float = 5.0,
        event_wait_s: float = 0.5,
    ) -> None:
        self._backend = backend
        self._inventory = inventory
        self._interval = sample_interval_s
        self._event_wait = min(event_wait_s, sample_interval_s)
        self._sticky: dict[int, str] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpu-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def apply_event(self, event: GPUEvent) -> None:
        if not marks_unhealthy(event):
            log.info("gpu=%d %s ignored (application error)", event.index, describe(event))
            return
        reason = describe(event)
        self._sticky.setdefault(event.index, reason)
        if self._inventory.set_health(event.index, False, self._sticky[event.index]):
            log.warning("gpu=%d unhealthy: %s", event.index, reason)

    def sample_all(self) -> None:
        for gpu in self._inventory.gpus():
            try:
                sample = self._backend.sample(gpu.index)
            except Exception as exc:  # a backend must not raise here; if it does, say so and go on
                log.error("gpu=%d health sample failed: %s", gpu.index, exc)
                continue
            sticky = self._sticky.get(gpu.index)
            healthy = sample.healthy and sticky is None
            reason = sticky or sample.health_reason
            if self._inventory.set_health(gpu.index, healthy, None if healthy else reason):
                log.warning(
                    "gpu=%d %s%s",
                    gpu.index,
                    "healthy" if healthy else "unhealthy: ",
                    "" if healthy else reason,
                )

    def _run(self) -> None:
        next_sample = 0.0
        while not self._stop.is_set():
            try:
                for event in self._backend.poll_events(timeout_s=self._event_wait):
                    self.apply_event(event)
            except Exception as exc:
                log.error("polling NVML events failed: %s", exc)
                self._stop.wait(self._event_wait)
            if time.monotonic() >= next_sample:
                self.sample_all()
                next_sample = time.monotonic() + self._interval
            # A non-blocking backend (the fake) returns at once; do not spin.
            self._stop.wait(0.05)
