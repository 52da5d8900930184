"""Reclaim cannot be blocked by what a victim's owner writes (issue 27, findings 3 and 7), on the simulated
cluster; tests/kube/test_kube_eviction.py does the same on the real API server.

- a PodDisruptionBudget allowing no disruption: by default (KAI's behaviour) the victim is deleted anyway;
  with `respect` the search picks other victims, and the waiting pod waits if there are none;
- a victim asking for a grace period of 11.6 days gets `max_victim_grace` (30 s);
- a pod being deleted still counts toward its queue's limit until it is gone.
"""

from __future__ import annotations

from typing import Any

from scheduler.framework.eviction import EvictionPolicy
from tests.framework.helpers import A100, cluster, node, pod, queue
from tests.queues.util import Recorder, gpus_by_queue


def budget(name: str, app: str, namespace: str, **spec: int) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": app}}, **spec}}  # fmt: skip


def borrower(name: str, app: str, **kw: Any) -> dict[str, Any]:
    obj = pod(name, "a", arrival_s=0, duration_s=100_000, gpus=1, **kw)
    obj["metadata"]["labels"]["app"] = app
    return obj


def world(**eviction: Any) -> tuple[Any, Recorder]:
    """Queue a (quota 1) borrows the whole node; b (quota 3) comes back for 2 GPUs. a's pods `keep-*` are
    under a budget that allows no disruption; `free-*` are not."""
    objs = [node("n1", A100, 4, 64, 512), queue("a", None, 1), queue("b", None, 3),
            budget("no-disruption", "keep", "a", maxUnavailable=0)]  # fmt: skip
    objs += [borrower(f"keep-{i}", "keep") for i in range(3)] + [borrower("free-0", "free")]
    objs += [pod(f"b-{i}", "b", arrival_s=5, duration_s=100_000, gpus=1) for i in range(2)]
    sim, sched = cluster(objs, eviction=EvictionPolicy(**eviction))
    return sim, Recorder(sim, sched)


def test_a_budget_allowing_no_disruption_does_not_stop_reclaim_by_default() -> None:
    sim, rec = world()
    rec.run(5 + 2 + 31)
    assert gpus_by_queue(sim) == {"a": 2.0, "b": 2.0}
    overridden = [e for e in sim.log if e["type"] == "BudgetOverridden"]
    assert overridden and all(e["pod"].startswith("a/keep-") for e in overridden)


def test_respecting_budgets_picks_other_victims_and_waits_when_there_are_none() -> None:
    sim, rec = world(budgets="respect")
    rec.run(5 + 2 + 31 + 70)
    # free-0 goes; keep-* stay: b gets the one GPU no budget protects, its other pod waits, told why.
    assert gpus_by_queue(sim) == {"a": 3.0, "b": 1.0}
    assert {e["pod"] for e in rec.evictions("reclaim")} == {"a/free-0"}
    assert not [e for e in sim.log if e["type"] == "BudgetOverridden"]
    waiting = [k for k in ("b/b-0", "b/b-1") if sim.pods[k].obj["status"]["phase"] == "Pending"]
    assert len(waiting) == 1 and sim.pods[waiting[0]].reason is not None


def test_a_victim_gets_at_most_the_capped_grace_period() -> None:
    objs = [node("n1", A100, 1, 64, 512), queue("a", None, 0), queue("b", None, 1),
            pod("slow", "a", arrival_s=0, duration_s=10**7, gpus=1, grace_s=1_000_000),
            pod("b-0", "b", arrival_s=5, duration_s=100, gpus=1)]  # fmt: skip
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(5 + 2)
    assert sim.pods["a/slow"].obj["metadata"]["deletionGracePeriodSeconds"] == 30
    rec.run(32)
    assert gpus_by_queue(sim) == {"b": 1.0}  # within 30 s, not 11.6 days


def test_pods_being_deleted_count_toward_their_queues_limit_until_gone() -> None:
    # The old pods run on old-n1; the new ones ask for the other node, where nothing they wait for runs.
    objs = [node("old-n1", A100, 2, 64, 512), node("new-n1", A100, 2, 64, 512), queue("a", None, 2, limit=2)]
    objs += [pod(f"old-{i}", "a", arrival_s=0, duration_s=10**6, gpus=1, grace_s=600,
                 node_selector={"pool": "old"}) for i in range(2)]  # fmt: skip
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(3)
    for i in range(2):  # the tenant deletes its pods (10 minutes to stop) and submits new ones at once
        uid = sim.pods[f"a/old-{i}"].obj["metadata"]["uid"]
        sim.evict(sched.cache.pods[uid], action="user", message="deleted by the user")
        sim.submit_pod(
            pod(f"new-{i}", "a", arrival_s=0, duration_s=10**6, gpus=1, node_selector={"pool": "new"})
        )
    for _ in range(620):
        rec.cycle()
        on_gpus = sum(1 for r in sim.pods.values() if r.obj["spec"].get("nodeName")
                      and r.obj["status"]["phase"] == "Running")  # fmt: skip
        assert on_gpus <= 2, f"queue a runs {on_gpus} GPUs at {sim.now_s}s, over its limit of 2"
    assert gpus_by_queue(sim) == {"a": 2.0} and all(f"a/new-{i}" in sim.pods for i in range(2))
    assert all(sim.pods[f"a/new-{i}"].obj["status"]["phase"] == "Running" for i in range(2))
