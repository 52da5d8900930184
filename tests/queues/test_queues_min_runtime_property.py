"""Property: no pod is evicted by reclaim or preempt before its queue's minimum runtime (resolved as KAI
does: the victim's queue for preempt, below the common ancestor for reclaim), over random queue trees,
minimum runtimes and workloads; and a pod that waits for one says so."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.api.queue import Queue
from scheduler.model.reasons import Reason
from scheduler.queues.min_runtime import MinRuntimes
from scheduler.queues.tree import QueueTree
from tests.framework.helpers import A100, cluster, node, pod, queue


@st.composite
def workloads(draw: st.DrawFn) -> list[dict]:
    objs: list[dict] = [node(f"n{i}", A100, 4, 64, 512) for i in range(draw(st.integers(1, 2)))]
    parents = [f"p{i}" for i in range(draw(st.integers(0, 2)))]
    runtimes = st.one_of(st.none(), st.sampled_from(["0", "20s", "45s", "1m30s"]))
    for p in parents:
        q = queue(p, None, draw(st.integers(0, 4)))
        q["spec"].update({k: v for k in ("preemptMinRuntime", "reclaimMinRuntime") if (v := draw(runtimes))})
        objs.append(q)
    for i in range(draw(st.integers(2, 4))):
        q = queue(f"q{i}", draw(st.sampled_from([None, *parents])), draw(st.integers(0, 4)))
        q["spec"].update({k: v for k in ("preemptMinRuntime", "reclaimMinRuntime") if (v := draw(runtimes))})
        objs.append(q)
        for k in range(draw(st.integers(0, 6))):
            cls = draw(st.sampled_from(["train", "train", "build"]))
            objs.append(pod(f"q{i}-{k}", f"q{i}", arrival_s=draw(st.sampled_from([0, 10, 40, 80])),
                            duration_s=draw(st.sampled_from([60, 10_000])), gpus=1, cpu="1", memory="1Gi",
                            priority_class=cls))  # fmt: skip
    return objs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_no_victim_is_younger_than_its_minimum_runtime(objs: list[dict]) -> None:
    sim, sched = cluster(objs)
    tree = QueueTree([Queue.model_validate(o) for o in objs if o["kind"] == "Queue"])
    runtimes = MinRuntimes(tree)
    queue_of = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["labels"]["tessera.dev/queue"]
                for o in objs if o["kind"] == "Pod"}  # fmt: skip
    for t in range(0, 300, 2):
        sim.advance(float(t))
        started = {k: r.started_s for k, r in sim.pods.items()}
        result = sched.run_cycle()
        for e in result.events:
            if e["type"] != "Evicted" or e["action"] not in ("reclaim", "preempt"):
                continue
            victim = queue_of[e["pod"]]
            need = (
                runtimes.reclaim_s(queue_of[e["beneficiary"]], victim)
                if e["action"] == "reclaim"
                else runtimes.preempt_s(victim)
            )
            age = t - (started[e["pod"]] or 0.0)
            assert age >= need, f"{e['pod']} evicted by {e['action']} at {age}s old, minimum runtime {need}s"
        for why in result.reasons.values():
            if why.reason is Reason.WAITING_FOR_MIN_RUNTIME:
                assert "waits for minimum runtime: first victim eligible in " in why.message
