"""KAI Scheduler's minruntime plugin tests, ported: which queue's minimum runtime applies (its resolver
tests, as data in `cases/minruntime_resolver.yaml`) and the Queue field's duration grammar (its
`parseMinRuntime` test), and KAI's two end-to-end tests with a minimum runtime, on the simulated cluster.
Its filter and scenario-validator tests run as action tables (`cases/minruntime_test.yaml`, run by
test_kai_tables.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from scheduler.api.keys import POD_GROUP
from scheduler.api.meta import ObjectMeta
from scheduler.api.queue import Queue, QueueSpec
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.queues.min_runtime import MinRuntimes
from scheduler.queues.tree import QueueTree
from scheduler.sim import builtin
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import Manifests
from scheduler.sim.runner import run_simulation
from tests.framework.helpers import A100

DATA = yaml.safe_load((Path(__file__).parent / "cases" / "minruntime_resolver.yaml").read_text())


def _tree(extra: list[dict[str, Any]] | None = None) -> QueueTree:
    queues = []
    for q in [*DATA["queues"], *(extra or [])]:
        spec: dict[str, Any] = {"parentQueue": q.get("parent")}
        if "preempt" in q:
            spec["preemptMinRuntime"] = q["preempt"]
        if "reclaim" in q:
            spec["reclaimMinRuntime"] = q["reclaim"]
        queues.append(Queue(metadata=ObjectMeta(name=q["name"]), spec=QueueSpec.model_validate(spec)))
    return QueueTree(queues)


@pytest.mark.parametrize("case", DATA["preempt"], ids=[c["kai"] for c in DATA["preempt"]])
def test_preempt_min_runtime_is_the_victims_queue_walking_up(case: dict[str, Any]) -> None:
    assert MinRuntimes(_tree()).preempt_s(case["victim"]) == case["want"]


@pytest.mark.parametrize("case", DATA["reclaim"], ids=[c["kai"] for c in DATA["reclaim"]])
def test_reclaim_min_runtime_is_resolved_below_the_common_ancestor(case: dict[str, Any]) -> None:
    runtimes = MinRuntimes(_tree(case.get("extra")))
    assert runtimes.reclaim_s(case["reclaimer"], case["victim"]) == case["want"]


@pytest.mark.parametrize("case", DATA["ancestors"], ids=[c["kai"] for c in DATA["ancestors"]])
def test_queue_paths(case: dict[str, Any]) -> None:
    tree = _tree(case.get("extra"))
    assert [n.name for n in reversed(tree.ancestors(case["queue"]))] == case["want"]


# minruntime_test.go, parseMinRuntime: KAI parses its plugin arguments with days and weeks too; a Queue's
# fields are metav1.Duration (Go's time.ParseDuration) in KAI and in Tessera, which has neither.
@pytest.mark.parametrize("text", ["5s", "10s", "10m5s", "1m", "1.5s", "2m30s", "1h", "1h30m", "2h45m15s"])
def test_parse_min_runtime_sanity(text: str) -> None:
    assert (QueueSpec.model_validate({"reclaimMinRuntime": text}).reclaim_min_runtime_s or 0) > 0


@pytest.mark.parametrize("text", ["5", "1h2", "2h45m15", "abc", "1h-30m", "dfdsfdfdf", "2d4h30m", "5w4d12h"])
def test_invalid_min_runtime_is_refused(text: str) -> None:
    with pytest.raises(ValidationError, match="is not a duration"):
        QueueSpec.model_validate({"preemptMinRuntime": text})


@pytest.mark.parametrize("text", ["-5s", "-10m", "-1h"])
def test_negative_min_runtime_is_refused(text: str) -> None:
    """KAI's plugin reads a negative default as 0 with an error in its log; a Queue says so at once."""
    with pytest.raises(ValidationError, match="cannot be negative"):
        QueueSpec.model_validate({"reclaimMinRuntime": text})


def test_min_runtime_round_trips_and_zero_means_none() -> None:
    spec = QueueSpec.model_validate({"preemptMinRuntime": "1h30m", "reclaimMinRuntime": "0"})
    assert spec.preempt_min_runtime_s == 5400 and spec.reclaim_min_runtime_s == 0
    assert spec.model_dump(by_alias=True, exclude_none=True)["preemptMinRuntime"] == "1h30m"
    with pytest.raises(ValidationError, match="more than the largest"):
        QueueSpec.model_validate({"preemptMinRuntime": "9000h"})


# KAI's end-to-end tests with a minimum runtime (test/e2e/suites/reclaim), on the simulated cluster with
# their queues (`CreateQueues`: a parent with quota and limit, two children, overQuotaWeight 2) and pods.
def _e2e_queues(
    parent: float, reclaimee: float, reclaimer: float, **reclaimee_spec: Any
) -> list[dict[str, Any]]:
    queues = [
        builtin.queue("parent", None, parent, weight=2, limit=parent),
        builtin.queue("reclaimee", "parent", reclaimee, weight=2),
        builtin.queue("reclaimer", "parent", reclaimer, weight=2),
    ]
    queues[1]["spec"].update(reclaimee_spec)
    return queues


def _gpu_pod(
    name: str, queue: str, arrival_s: float, gpus: int = 1, group: str | None = None
) -> dict[str, Any]:
    annotations = {POD_GROUP: group} if group else None
    return builtin.pod(
        name, queue, arrival_s=arrival_s, duration_s=36_000, gpus=gpus, annotations=annotations
    )


def _events(objs: list[dict[str, Any]], until_s: float) -> list[dict[str, Any]]:
    m = Manifests()
    for o in objs:
        m.objects[o["kind"]].append(o)
    sim = SimCluster.from_manifests(m)
    sched = Scheduler(sim, SchedulerConfig(backend="numpy", expected_nodes=4))
    return run_simulation(sim, sched, until_s=until_s).events


def test_kai_e2e_simple_priority_reclaim_but_has_min_runtime() -> None:
    """reclaim_test.go "Simple priority reclaim - but has min runtime": the reclaimer (priority 101) waits
    until the reclaimee's jobs have run 60s, then gets its GPU."""
    objs: list[dict[str, Any]] = [builtin.node("gpu-0", A100, 4, 64, 512)]
    objs += _e2e_queues(4, 1, 0, reclaimMinRuntime="60s")
    objs[-1]["spec"]["priority"] = 101
    objs += [_gpu_pod("pod-1", "reclaimee", 0), _gpu_pod("pod-3", "reclaimee", 0, gpus=3),
             _gpu_pod("reclaimer", "reclaimer", 5)]  # fmt: skip
    events = _events(objs, 120)
    evicted = [e for e in events if e["type"] == "Evicted"]
    assert len(evicted) == 1 and evicted[0]["action"] == "reclaim" and evicted[0]["time_s"] == 60.0
    bound = [e for e in events if e["type"] == "Scheduled" and e["pod"].endswith("/reclaimer")]
    assert [e["time_s"] for e in bound] == [90.0]  # once the victim has terminated (30 s)


def test_kai_e2e_reclaim_elastic_job_with_min_runtime_protecting() -> None:
    """reclaim_elastic_test.go "Reclaim elastic job with min runtime protecting": the elastic reclaimee's
    members above minMember go at once for a 2-pod job, its last member only after 90s."""
    objs: list[dict[str, Any]] = [builtin.node("gpu-0", A100, 3, 64, 512)]
    objs += _e2e_queues(3, 0, 3, reclaimMinRuntime="90s")
    objs[1]["spec"]["resources"]["gpu"]["overQuotaWeight"] = 0
    objs += [
        builtin.podgroup("elastic", "reclaimee", "reclaimee", 1),
        builtin.podgroup("r1", "reclaimer", "reclaimer", 2),
    ]
    objs += [_gpu_pod(f"elastic-{i}", "reclaimee", 0, group="elastic") for i in range(3)]
    objs += [_gpu_pod(f"r1-{i}", "reclaimer", 10, group="r1") for i in range(2)]
    objs += [_gpu_pod("r2-0", "reclaimer", 50)]
    events = _events(objs, 150)
    evicted = [(e["time_s"], e["pod"]) for e in events if e["type"] == "Evicted"]
    assert [t for t, _ in evicted] == [10.0, 10.0, 90.0]  # two extras at once; the core at 90s
    assert evicted[2][1] == "reclaimee/elastic-0" and {p for _, p in evicted[:2]} == {
        "reclaimee/elastic-1",
        "reclaimee/elastic-2",
    }
    bound = {
        e["pod"]: e["time_s"]
        for e in events
        if e["type"] == "Scheduled" and e["pod"].startswith("reclaimer/")
    }
    assert bound == {"reclaimer/r1-0": 40.0, "reclaimer/r1-1": 40.0, "reclaimer/r2-0": 120.0}
