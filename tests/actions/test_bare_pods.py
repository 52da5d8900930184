"""One `movable()` rule for every action that moves pods (issue 27 finding 6, issue 30 item 1): only pods a
controller owns are moved (a move is an eviction its controller undoes by recreating the pod; a bare pod
would simply be lost). Reclaim and preempt do not move: they evict, and take bare pods as victims as KAI
Scheduler does (a queue below its quota gets it back), with no place planned for them.

One test per action; consolidation's own is
`tests/actions/test_consolidate.py::test_a_pod_no_controller_owns_is_never_moved`.
"""

from __future__ import annotations

from typing import Any

from scheduler.api.keys import GPU_FRACTION
from scheduler.sim.builtin import pod, podgroup, queue
from scheduler.sim.cluster import SIM_RECREATE
from tests.framework.helpers import A100, cluster, node, phase
from tests.queues.util import GRACE_S, Recorder
from tests.topology.test_topology_actions import RACK, gang_pods, rack_nodes, recorder
from tests.topology.util import FOREVER, topology

BARE = {SIM_RECREATE: "false"}  # the simulator gives such a pod no stand-in controller


def test_topology_consolidation_never_moves_a_bare_pod() -> None:
    """Finding 6's scenario: two racks of two 4-GPU nodes, 12 single pods spread over them (2 GPUs free per
    rack), a gang of 3 that must share a rack. With owned pods one moves and the gang runs
    (tests/topology/test_topology_actions.py); with bare pods nothing is evicted, and the gang waits."""
    singles = [pod(f"s{i}", "batch", arrival_s=0, duration_s=FOREVER, gpus=1, cpu="1", annotations=BARE)
               for i in range(12)]  # fmt: skip
    gang_pg = podgroup("ddp", "train", "train", 3)
    gang_pg["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": RACK}
    rec = recorder([
        queue("batch", None, -1), queue("train", None, -1), topology("dc", RACK), *rack_nodes(2, 2, 4),
        *singles, gang_pg, *gang_pods("ddp", "train", 3, arrival_s=3, annotations={}),
    ], policy="spread")  # fmt: skip
    rec.run(4 + GRACE_S)
    assert rec.evictions() == []
    assert all(phase(rec.sim, f"batch/s{i}") == "Running" for i in range(12))  # nobody lost
    assert phase(rec.sim, "train/ddp-0") == "Pending" and rec.sim.pods["train/ddp-0"].reason is not None


def _borrowers(n: int, **kw: Any) -> list[dict[str, Any]]:
    return [pod(f"bare-{i}", "a", arrival_s=0, duration_s=FOREVER, gpus=1, cpu="1", annotations=BARE, **kw)
            for i in range(n)]  # fmt: skip


def test_reclaim_evicts_bare_pods_and_plans_no_place_for_them() -> None:
    objs = [node("n1", A100, 2, 32, 256), queue("a", None, 0), queue("b", None, 2), *_borrowers(2)]
    objs += [pod(f"b-{i}", "b", arrival_s=3, duration_s=FOREVER, gpus=1, cpu="1") for i in range(2)]
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(4)
    assert {e["pod"] for e in rec.evictions("reclaim")} == {"a/bare-0", "a/bare-1"}
    assert not [k for k, r in sched.cache.ledger.reservations().items() if r.uid is None]  # not moves
    rec.run(GRACE_S + 2)
    assert phase(sim, "b/b-0") == phase(sim, "b/b-1") == "Running"
    assert "a/bare-0" not in sim.pods and "a/bare-1" not in sim.pods  # evicted, and no controller


def test_preempt_evicts_a_bare_pod_and_plans_no_place_for_it() -> None:
    objs = [node("n1", A100, 1, 32, 256), queue("a", None, 1), *_borrowers(1)]
    objs.append(
        pod("urgent", "a", arrival_s=3, duration_s=FOREVER, gpus=1, cpu="1", priority_class="inference")
    )
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(4)
    assert [e["pod"] for e in rec.evictions("preempt")] == ["a/bare-0"]
    assert not [k for k, r in sched.cache.ledger.reservations().items() if r.uid is None]
    rec.run(GRACE_S + 2)
    assert phase(sim, "a/urgent") == "Running" and "a/bare-0" not in sim.pods


def test_consolidation_moves_owned_pods_around_bare_ones() -> None:
    """Bare and owned halves share the GPUs: only owned ones are moved to make room for a whole GPU."""
    half = {GPU_FRACTION: "0.5"}
    objs = [node("n1", A100, 2, 32, 256), node("n2", A100, 2, 32, 256), queue("q", None, 4)]
    objs += [pod(f"h{i}", "q", arrival_s=0, duration_s=50 if i % 2 else FOREVER, cpu="1",
                 annotations={**half, **(BARE if i in (0, 2) else {})}) for i in range(8)]  # fmt: skip
    objs.append(pod("big", "q", arrival_s=60, duration_s=FOREVER, gpus=2, cpu="1"))
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    rec.run(62 + GRACE_S)
    moved = {e["pod"] for e in rec.evictions("consolidate")}
    assert moved and moved.isdisjoint({"q/h0", "q/h2"})
    assert phase(sim, "q/h0") == phase(sim, "q/h2") == phase(sim, "q/big") == "Running"
