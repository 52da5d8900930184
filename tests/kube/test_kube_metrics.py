"""Scheduler metrics: names, labels and the pending-reasons reset, read back in the exposition format."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.framework.metrics import SchedulerMetrics


def _samples(metrics: SchedulerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_metrics_exposition() -> None:
    m = SchedulerMetrics()
    with m.time_cycle(), m.time_action("allocate"):
        pass
    m.scheduled.labels("allocate").inc(3)
    m.evicted.labels("reclaim").inc()
    m.set_queue("team-a", "gpu", fair_share=2.5, allocated=1, quota=2)
    m.set_pending({"no node has 0.5 GPU free": 2, "queue over limit": 1})
    m.set_pending({"queue over limit": 4})
    s = _samples(m)
    assert s[("tessera_cycle_duration_seconds_count", ())] == 1
    assert s[("tessera_action_duration_seconds_count", (("action", "allocate"),))] == 1
    assert s[("tessera_pods_scheduled_total", (("action", "allocate"),))] == 3
    assert s[("tessera_pods_evicted_total", (("action", "reclaim"),))] == 1
    assert s[("tessera_queue_fair_share", (("queue", "team-a"), ("resource", "gpu")))] == 2.5
    assert s[("tessera_queue_quota", (("queue", "team-a"), ("resource", "gpu")))] == 2
    assert s[("tessera_pending_pods", (("reason", "no node has 0.5 GPU free"),))] == 0
    assert s[("tessera_pending_pods", (("reason", "queue over limit"),))] == 4
    m.drop_queue("team-a")
    assert ("tessera_queue_allocated", (("queue", "team-a"), ("resource", "gpu"))) not in _samples(m)
