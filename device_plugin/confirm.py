"""Pods marked `tessera.dev/gpu-allocated` once the kubelet holds what `Allocate` answered them with.

Two ways in: right after a pod's last `Allocate` (`after_allocate`: its devices appear in the kubelet's
PodResources a moment later, once the kubelet has recorded them; asked every `poll_s` for `window_s`), and
from `PreStartContainer`, which has checked it already (`confirmed`). Either way one background thread
writes the mark (one request), so neither the kubelet's admission nor a container's start waits for the
API server, and a write that fails is tried again.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from device_plugin.cluster import ClusterError, PodMarker
from device_plugin.kubelet_pods import HeldDevices, KubeletPods, KubeletPodsError
from device_plugin.pods import PodView
from scheduler.api.allocation import GPUAllocation

log = logging.getLogger(__name__)


class Pods(Protocol):
    def get(self, uid: str) -> PodView | None: ...


@dataclass
class _Pending:
    pod: PodView
    resource: str
    answered: frozenset[str]
    allocation: GPUAllocation
    confirmed: bool
    until: float  # monotonic: stop asking the kubelet (PreStartContainer confirms it then)
    next_try: float = 0.0
    failures: int = 0


def holds(held: HeldDevices, pod: PodView, resource: str, answered: frozenset[str]) -> bool:
    """Whether the kubelet shows `pod` holding what it was answered with: every container it lists that asks
    for `resource` holds devices, all among `answered`. (A pod whose only such containers are plain init
    containers cannot be confirmed this way: the kubelet does not list them.)"""
    listed = [c for c in pod.asking(resource) if c.kind != "init"]
    if not listed:
        return False
    for c in listed:
        devices = held.of(c.name, resource)
        if not devices or not devices <= answered:
            return False
    return True


class Confirmations:
    def __init__(
        self,
        marker: PodMarker,
        kubelet: KubeletPods | None,
        pods: Pods,
        *,
        window_s: float = 5.0,
        poll_s: float = 0.02,
        give_up_s: float = 120.0,
    ) -> None:
        self._marker = marker
        self._kubelet = kubelet
        self._pods = pods
        self._window = window_s
        self._poll = poll_s
        self._give_up = give_up_s
        self._pending: dict[str, _Pending] = {}  # by pod uid
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="confirm", daemon=True)
        self.marked = 0  # marks written (for tests and logs)

    def start(self) -> Confirmations:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def after_allocate(
        self, pod: PodView, resource: str, answered: frozenset[str], allocation: GPUAllocation
    ) -> None:
        """Every container of `pod` asking for `resource` was answered: mark it once the kubelet shows it
        holding `answered`."""
        with self._cond:
            self._pending[pod.uid] = _Pending(
                pod, resource, answered, allocation, False, time.monotonic() + self._window
            )
            self._cond.notify_all()

    def confirmed(self, pod: PodView, allocation: GPUAllocation) -> None:
        """PreStartContainer found `pod` holding its devices: mark it (unless it is marked so already)."""
        if _marked(pod, allocation):
            return
        with self._cond:
            item = self._pending.get(pod.uid)
            if item is None:
                self._pending[pod.uid] = _Pending(pod, "", frozenset(), allocation, True, time.monotonic())
            else:
                item.confirmed, item.allocation = True, allocation
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                items = list(self._pending.items())
            for uid, item in items:
                if self._step(item):
                    with self._cond:
                        if self._pending.get(uid) is item:
                            del self._pending[uid]
            with self._cond:
                if self._pending and not self._stop:
                    self._cond.wait(self._poll)

    def _step(self, item: _Pending) -> bool:
        """One look at a pending pod; whether it is done with (marked, gone, or given up)."""
        now = time.monotonic()
        current = self._pods.get(item.pod.uid)
        if current is None or _marked(current, item.allocation):
            return True  # deleted (or marked so already)
        if not item.confirmed:
            if now > item.until:
                log.info("pod %s: the kubelet did not show its devices within %.0f s; PreStartContainer "
                         "confirms it", item.pod.ref, self._window)  # fmt: skip
                return True
            if self._kubelet is None:
                return True
            try:
                held = self._kubelet.get(item.pod.namespace, item.pod.name)
            except KubeletPodsError as exc:
                log.debug("pod %s: %s", item.pod.ref, exc)
                return False
            if held is None or not holds(held, item.pod, item.resource, item.answered):
                return False
            item.confirmed = True
        if now < item.next_try:
            return False
        try:
            self._marker.mark_allocated(current, item.allocation)
        except ClusterError as exc:
            item.failures += 1
            if "deleted or replaced" in str(exc) or item.failures * 2 > self._give_up:
                log.warning("pod %s not marked allocated: %s", item.pod.ref, exc)
                return True
            item.next_try = now + min(10.0, 0.5 * 2**item.failures)
            log.warning("pod %s not marked allocated yet (%s); trying again", item.pod.ref, exc)
            return False
        self.marked += 1
        log.info("allocated pod=%s gpus=%s", item.pod.ref, ",".join(g.uuid for g in item.allocation.gpus))
        return True


def _marked(pod: PodView, allocation: GPUAllocation) -> bool:
    current = pod.allocation()
    return current is not None and current.gpus == allocation.gpus
