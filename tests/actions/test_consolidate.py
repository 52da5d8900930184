"""Consolidation: a pod blocked by fragmentation is placed by moving preemptible pods to planned places."""

import re

from scheduler.api.gpu_request import GPURequest
from scheduler.api.keys import GPU_FRACTION
from scheduler.cache.reservations import Reservation, match_reservations
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.reasons import Reason
from scheduler.model.types import GPUShare, Placement, PodInfo
from scheduler.sim.cluster import SIM_RECREATE
from tests.framework.helpers import A100, assignment, cluster, node, phase, pod, queue
from tests.queues.util import GRACE_S, Recorder, gpus_by_queue

HALF = {GPU_FRACTION: "0.5"}


def fragmented(actions: tuple[str, ...] | None = None, n_big: int = 3) -> tuple[Recorder, list[str]]:
    """4 nodes x 2 GPUs; 16 half-GPU pods, every other one finishes at t=50: 8 halves left, one per GPU."""
    objs = [*(node(f"n{i}", A100, 2, 32, 256) for i in range(4)), queue("q", None, 8)]
    objs += [pod(f"h-{i:02d}", "q", arrival_s=0, duration_s=50 if i % 2 == 0 else 10_000, cpu="1",
                 memory="4Gi", annotations=HALF) for i in range(16)]  # fmt: skip
    big = [f"big-{i}" for i in range(n_big)]
    objs += [pod(b, "q", arrival_s=60, duration_s=10_000, gpus=2, cpu="4", memory="16Gi") for b in big]
    sim, sched = cluster(objs)
    if actions is not None:
        sched = Scheduler(sim, SchedulerConfig(policy="binpack", backend="numpy", actions=actions))
    return Recorder(sim, sched), big


def test_consolidation_raises_allocation_and_moves_land_where_planned():
    rec, big = fragmented()
    rec.run(58)
    sim = rec.sim
    assert gpus_by_queue(sim) == {"q": 4.0}
    assert all(len({g.index for g in assignment(sim, f"q/h-{i:02d}").gpus}) == 1 for i in range(1, 16, 2))
    rec.run(4)  # the big pods arrive at t=60: pods are moved out of their way
    waiting = [b for b in big if sim.pods[f"q/{b}"].reason[0] == Reason.PIPELINED]
    assert rec.evictions("consolidate") and len(waiting) == 2  # placed, bound once the moved pods are gone
    rec.run(GRACE_S)  # the moved pods have terminated: they and the big pods are bound where planned
    assert gpus_by_queue(sim) == {"q": 8.0}  # from 4 of 8 GPUs to all 8
    assert [phase(sim, f"q/{b}") for b in big].count("Running") == 2
    moves = rec.evictions("consolidate")
    assert 1 <= len(moves) <= 4
    for e in moves:
        m = re.search(r"moved to (\S+) GPU (\d+)", e["message"])
        assert m and e["beneficiary"].startswith("q/big-")
        a = assignment(sim, e["pod"])
        assert (
            phase(sim, e["pod"]) == "Running" and a.node == m.group(1) and a.gpus[0].index == int(m.group(2))
        )
    halves = [k for k in sim.pods if k.startswith("q/h-") and phase(sim, k) == "Running"]
    assert len(halves) == 8  # nobody lost
    assert rec.sched.cache.ledger.reservations() == {}


def test_without_consolidation_the_big_pods_stay_pending():
    rec, big = fragmented(actions=("allocate",))
    rec.run(62)
    assert gpus_by_queue(rec.sim) == {"q": 4.0}
    assert all(phase(rec.sim, f"q/{b}") == "Pending" for b in big)


def test_never_evicts_a_pod_it_could_not_replace():
    # a-0: a movable half-GPU pod that needs 30 CPUs (no other node has them); b-0: a non-preemptible half.
    objs = [node("a-0", A100, 1, 32, 256), node("b-0", A100, 1, 8, 256), queue("q", None, 2)]
    objs.append(pod("mover", "q", arrival_s=0, duration_s=10_000, cpu="30", annotations=HALF))
    objs.append(pod("server", "q", arrival_s=0, duration_s=10_000, cpu="2", annotations=HALF,
                    priority_class="inference", node_selector={"pool": "b"}))  # fmt: skip
    objs.append(pod("whole", "q", arrival_s=5, duration_s=10_000, cpu="1", gpus=1))
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(10)
    assert assignment(sim, "q/mover").node == "a-0" and assignment(sim, "q/server").node == "b-0"
    assert rec.evictions() == []
    reason = sim.pods["q/whole"].reason
    assert (
        reason[0] == Reason.FRAGMENTED and "1 GPUs are free on nodes that match, but in pieces" in reason[1]
    )


def _pod(name: str, ns: str = "team", queue_name: str = "q", milli: int = 500) -> PodInfo:
    return PodInfo(uid=f"u-{name}", namespace=ns, name=name, queue=queue_name, priority=50, preemptible=True,
                   request=GPURequest(kind="fraction", milli=milli, num_devices=1), cpu_milli=1000)  # fmt: skip


def test_reservation_is_claimed_by_name_or_by_an_identical_replacement():
    pl = Placement(node=0, gpus=(GPUShare(0, 500, 20480),), cpu_milli=1000, memory_mib=0)
    res = {
        "team/a": Reservation.of(_pod("a"), "q", pl, "team/big", expires_s=60),
        "team/b": Reservation.of(_pod("b"), "q", pl, "team/big", expires_s=60),
    }
    pending = [_pod("a"), _pod("b-x7k2"), _pod("c", milli=250), _pod("d", ns="other")]
    assert match_reservations(res, pending) == {"u-a": "team/a", "u-b-x7k2": "team/b"}


def test_a_reservation_nobody_claims_lapses():
    rec, _ = fragmented(n_big=2)
    for key, pod_rec in rec.sim.pods.items():  # their controller will not recreate them
        if key.startswith("q/h-"):
            pod_rec.obj["metadata"]["annotations"][SIM_RECREATE] = "false"
    rec.run(61)
    cache = rec.sched.cache
    kept = cache.ledger.reservations()
    moved = {k: r for k, r in kept.items() if r.uid is None}
    # Kept while the moved pods terminate (grace 30 s) and their controller would recreate them, and 60 s.
    assert moved and all(res.expires_s == 60.0 + GRACE_S + 60.0 for res in moved.values())
    reserved = sum(g.milli for res in moved.values() for g in res.placement.gpus)
    assert cache.state.allocated_milli() == 8000  # 2 big pods, the halves left, the places kept for the moved
    rec.run(60 + GRACE_S)
    assert cache.ledger.reservations() == {}
    assert cache.state.allocated_milli() == 8000 - reserved  # given back


def test_a_pod_no_controller_owns_is_never_moved():
    """A move is an eviction its controller undoes by recreating the pod: a bare pod (no controller
    ownerReference) would be lost, so consolidation leaves it where it is and the pods blocked by it wait
    (with owned pods the same cluster consolidates: `test_consolidation_raises_allocation...`)."""
    objs = [*(node(f"n{i}", A100, 2, 32, 256) for i in range(4)), queue("q", None, 8)]
    bare = {**HALF, SIM_RECREATE: "false"}  # the simulator gives these no stand-in controller
    objs += [pod(f"h-{i:02d}", "q", arrival_s=0, duration_s=50 if i % 2 == 0 else 10_000, cpu="1",
                 memory="4Gi", annotations=bare) for i in range(16)]  # fmt: skip
    objs += [
        pod(f"big-{i}", "q", arrival_s=60, duration_s=10_000, gpus=2, cpu="4", memory="16Gi")
        for i in range(3)
    ]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(60 + 2 * GRACE_S)
    assert rec.evictions("consolidate") == []
    assert gpus_by_queue(sim) == {"q": 4.0}  # the big pods wait: nothing is moved out of their way
    halves = [k for k in sim.pods if k.startswith("q/h-") and phase(sim, k) == "Running"]
    assert len(halves) == 8  # nobody lost
