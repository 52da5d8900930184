"""The scheduler's Prometheus metrics, on their own registry (several schedulers can live in one test
process), served on /metrics by the scheduler's HTTP port (`scheduler/kube/http_server.py`, on the kept
server; prometheus-client's own server would give each connection a thread)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from time import perf_counter

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Cycles run every second and should take milliseconds; large clusters may take longer.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.cycle_seconds = Histogram(
            "tessera_cycle_duration_seconds",
            "Duration of one scheduling cycle",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.action_seconds = Histogram(
            "tessera_action_duration_seconds",
            "Duration of one action in a cycle",
            ["action"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.scheduled = Counter(
            "tessera_pods_scheduled_total",
            "Pods bound, by the action that placed them",
            ["action"],
            registry=r,
        )
        self.evicted = Counter(
            "tessera_pods_evicted_total",
            "Pods evicted, by the action that evicted them",
            ["action"],
            registry=r,
        )
        self.bind_failures = Counter(
            "tessera_bind_failures_total", "Bindings that failed and were rolled back", registry=r
        )
        self.queue_fair_share = Gauge(
            "tessera_queue_fair_share",
            "Fair share of a queue per resource",
            ["queue", "resource"],
            registry=r,
        )
        self.queue_allocated = Gauge(
            "tessera_queue_allocated", "Allocated to a queue per resource", ["queue", "resource"], registry=r
        )
        self.queue_quota = Gauge(
            "tessera_queue_quota",
            "Quota of a queue per resource (-1 = unlimited)",
            ["queue", "resource"],
            registry=r,
        )
        self.pending = Gauge("tessera_pending_pods", "Pending pods by reason", ["reason"], registry=r)
        self.gpu_allocated = Gauge(
            "tessera_gpu_allocated_fraction",
            "Allocated fraction of each GPU (pods being deleted count until they are gone)",
            ["node", "gpu"],
            registry=r,
        )
        self._pending_reasons: set[str] = set()
        self._queues: set[tuple[str, str]] = set()

    @contextmanager
    def time_cycle(self) -> Iterator[None]:
        start = perf_counter()
        try:
            yield
        finally:
            self.cycle_seconds.observe(perf_counter() - start)

    @contextmanager
    def time_action(self, action: str) -> Iterator[None]:
        start = perf_counter()
        try:
            yield
        finally:
            self.action_seconds.labels(action).observe(perf_counter() - start)

    def set_pending(self, by_reason: Mapping[str, int]) -> None:
        """Replace the pending-pods breakdown (reasons that disappeared go to zero, not stale)."""
        for reason in self._pending_reasons - set(by_reason):
            self.pending.labels(reason).set(0)
        for reason, count in by_reason.items():
            self.pending.labels(reason).set(count)
        self._pending_reasons |= set(by_reason)

    def set_queue(
        self, queue: str, resource: str, *, fair_share: float, allocated: float, quota: float
    ) -> None:
        self.queue_fair_share.labels(queue, resource).set(fair_share)
        self.queue_allocated.labels(queue, resource).set(allocated)
        self.queue_quota.labels(queue, resource).set(quota)
        self._queues.add((queue, resource))

    def drop_queue(self, queue: str) -> None:
        for q, resource in [k for k in self._queues if k[0] == queue]:
            for gauge in (self.queue_fair_share, self.queue_allocated, self.queue_quota):
                gauge.remove(q, resource)
            self._queues.discard((q, resource))
