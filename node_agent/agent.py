"""A collection round and the loop repeating it: NVML -> owners -> report -> watchdog, publish, metrics."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from node_agent.cgroup import CgroupResolver, ContainerRef
from node_agent.enforcer import Watchdog
from node_agent.events import EventSink, LogEvents, node_ref
from node_agent.metrics import AgentMetrics
from node_agent.nvml import NVMLBackend, marks_unhealthy
from node_agent.pods import PodInfo, PodSource, StaticPods
from node_agent.publisher import ReportPublisher
from node_agent.report import Observation, build_report
from scheduler.api import GPUNodeReport

log = logging.getLogger(__name__)


class Agent:
    def __init__(
        self,
        node: str,
        backend: NVMLBackend,
        *,
        pods: PodSource | None = None,
        resolver: CgroupResolver | None = None,
        watchdog: Watchdog | None = None,
        publisher: ReportPublisher | None = None,
        metrics: AgentMetrics | None = None,
        events: EventSink | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.node = node
        self.backend = backend
        self.pods = pods or StaticPods()
        self.resolver = resolver or CgroupResolver()
        self.metrics = metrics or AgentMetrics(node)
        self.watchdog = watchdog or Watchdog("report")
        self.publisher = publisher
        self.events = events or LogEvents()
        self._unhealthy: dict[int, str] = {}  # GPU index -> reason already announced
        self._warned: set[str] = set()  # pod UIDs whose unusable assignment was logged
        self._clock = clock
        self._wall_clock = wall_clock
        self._devices = backend.devices()
        cuda = getattr(backend, "cuda_version", None)
        self._driver = backend.driver_version()
        self._cuda: str | None = cuda() if callable(cuda) else None
        self.latest: GPUNodeReport | None = None
        self.last_tick: float | None = None

    def _owners(self, pids: set[int]) -> dict[int, ContainerRef | None]:
        return {pid: self.resolver.resolve(pid) for pid in pids}

    def _pod_uid_of(self, pid: int) -> str | None:
        ref = self.resolver.resolve(pid)
        return ref.pod_uid if ref is not None else None

    def tick(self) -> GPUNodeReport:
        started = time.perf_counter()
        for event in self.backend.poll_events(0.0):
            level = logging.ERROR if marks_unhealthy(event) else logging.INFO
            log.log(level, "GPU %d: %s event code=%d %s", event.index, event.kind, event.code, event.message)
            self.metrics.event(event)
        samples = [self.backend.sample(d.index) for d in self._devices]
        owners = self._owners({p.pid for s in samples for p in s.processes})
        pods = self.pods.pods()
        if any(ref is not None and ref.pod_uid not in pods for ref in owners.values()):
            self.pods.refresh()  # a pod we have not listed yet: look again soon
        self._warn_unusable_assignments(pods)
        obs = Observation(self._devices, samples, owners, pods, self._driver, self._cuda)
        report = build_report(self.node, obs, now=self._wall_clock())
        self._announce_health(report)
        for action in self.watchdog.check(report, pods, owner_of=self._pod_uid_of):
            self.metrics.action(action)
        if self.publisher is not None and self.publisher.publish(report):
            self.metrics.publishes.inc()
        self.metrics.update(report)
        self.metrics.collect_seconds.set(time.perf_counter() - started)
        self.latest = report
        self.last_tick = self._clock()
        return report

    def _warn_unusable_assignments(self, pods: Mapping[str, PodInfo]) -> None:
        """Say once per pod why its share cannot be checked (the watchdog leaves such pods alone)."""
        uuids = {d.uuid for d in self._devices}
        for pod in pods.values():
            if pod.uid in self._warned:
                continue
            problem = pod.assignment_error
            if pod.assignment is not None and pod.assignment.node != self.node:
                problem = f"its assignment names node {pod.assignment.node!r}"
            elif pod.assignment is not None:
                missing = [g.uuid for g in pod.assignment.gpus if g.uuid and g.uuid not in uuids]
                if missing:
                    problem = f"its assignment names GPUs not on this node: {', '.join(missing)}"
            if problem:
                self._warned.add(pod.uid)
                log.warning("pod %s/%s: share not enforced: %s", pod.namespace, pod.name, problem)

    def _announce_health(self, report: GPUNodeReport) -> None:
        """A Warning event on the node when one of its GPUs turns unhealthy (once per GPU and reason)."""
        for gpu in report.spec.gpus:
            if gpu.health == "Healthy":
                self._unhealthy.pop(gpu.index, None)
                continue
            reason = gpu.health_reason or "unknown"
            if self._unhealthy.get(gpu.index) != reason:
                self._unhealthy[gpu.index] = reason
                message = f"GPU {gpu.index} ({gpu.uuid}, {gpu.model}) is unhealthy: {reason}"
                self.events.emit(node_ref(self.node), "GPUUnhealthy", message)

    def run(self, interval_s: float, stop: threading.Event) -> None:
        """Tick every `interval_s` until `stop` is set; a failing round is logged, the loop goes on."""
        while not stop.is_set():
            began = time.monotonic()
            try:
                self.tick()
            except Exception:
                log.exception("collection round failed")
            stop.wait(max(0.0, interval_s - (time.monotonic() - began)))
