"""Topology gangs through the whole cycle: constraints from annotations, bad constraints told, a
Topology created later, consolidation freeing a domain, reclaim evicting inside one domain only."""

from __future__ import annotations

from typing import Any

from scheduler.api.keys import POD_GROUP
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.reasons import Reason
from scheduler.sim.builtin import pod, podgroup, queue
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import Manifests
from tests.framework.helpers import assignment, phase
from tests.queues.util import GRACE_S, Recorder
from tests.topology.util import FOREVER, Gang, gpu_node, topology, world

RACK = "example.com/rack"


def rack_nodes(racks: int, per_rack: int, gpus: int) -> list[dict[str, Any]]:
    return [
        gpu_node(f"node{r * per_rack + i}", gpus, {"example.com/zone": "z1", RACK: f"rack{r + 1}"})
        for r in range(racks) for i in range(per_rack)
    ]  # fmt: skip


def rack_of(rec: Recorder, key: str) -> str:
    a = assignment(rec.sim, key)
    assert a is not None
    return str(rec.sim.nodes[a.node]["metadata"]["labels"][RACK])


def recorder(objects: list[dict[str, Any]], policy: str = "binpack") -> Recorder:
    m = Manifests()
    for o in objects:
        m.objects[o["kind"]].append(o)
    sim = SimCluster.from_manifests(m)
    return Recorder(sim, Scheduler(sim, SchedulerConfig(policy=policy, backend="numpy")))


def gang_pods(
    name: str, queue_name: str, n: int, *, arrival_s: float, annotations: dict[str, str]
) -> list[Any]:
    return [
        pod(f"{name}-{i}", queue_name, arrival_s=arrival_s, duration_s=FOREVER, gpus=1, cpu="1",
            annotations={POD_GROUP: name, **annotations})
        for i in range(n)
    ]  # fmt: skip


def test_kai_annotations_place_a_gang_without_a_constraint_in_its_podgroup() -> None:
    """KAI's workload annotations (kai.scheduler/topology, ...-required-placement) are honoured on pods
    whose PodGroup states no constraint, as the podgrouper would derive it."""
    kai = {"kai.scheduler/topology": "dc", "kai.scheduler/topology-required-placement": "rack"}
    rec = recorder([
        queue("queue0", None, -1), topology("dc", "example.com/zone", RACK, aliases={RACK: "rack"}),
        *rack_nodes(2, 2, 2), podgroup("g", "queue0", "queue0", 4),
        pod("filler", "queue0", arrival_s=0, duration_s=FOREVER, gpus=1, cpu="1"),
        *gang_pods("g", "queue0", 4, arrival_s=2, annotations=kai),
    ])  # fmt: skip
    rec.run(4)
    assert rack_of(rec, "queue0/filler") == "rack1"
    # rack1 holds only 3 more: the whole gang goes to rack2 (binpack alone would start on rack1's nodes).
    assert {rack_of(rec, f"queue0/g-{i}") for i in range(4)} == {"rack2"}


def test_bad_constraints_are_told_and_a_topology_created_later_is_used() -> None:
    w = world([], rack_nodes(1, 2, 2), Gang(topology="dc", required="rack"))
    reason = w.reason()
    assert reason is not None and reason[0] == Reason.INVALID_TOPOLOGY
    assert "topology dc does not exist" in reason[1]
    w.sim.add_object("Topology", topology("dc", "example.com/zone", RACK))
    w.run()
    reason = w.reason()
    assert reason is not None and reason[0] == Reason.INVALID_TOPOLOGY
    assert "has no level rack (required); its levels: example.com/zone, example.com/rack" in reason[1]
    w.sim.add_object(
        "Topology", topology("dc", "example.com/zone", RACK, aliases={RACK: "rack"})
    )  # an update
    w.run()
    assert set(w.placement().values()) <= {"node0", "node1"} and None not in w.placement().values()


def test_levels_without_a_topology_are_invalid() -> None:
    w = world([topology("dc", RACK)], rack_nodes(1, 1, 2), Gang(topology=None, required=RACK))
    reason = w.reason()
    assert reason is not None and reason[0] == Reason.INVALID_TOPOLOGY and "but no topology" in reason[1]


def test_consolidation_moves_pods_out_of_a_rack_to_make_room_for_a_gang() -> None:
    """Two racks of two 4-GPU nodes, each node running three single preemptible pods (spread): each rack
    has 2 GPUs free, the gang needs 3 in one rack. Consolidation moves one pod out of a rack, to a planned
    place in the other, and the gang runs in the freed rack; its pods never straddle racks."""
    singles = [pod(f"s{i}", "batch", arrival_s=0, duration_s=FOREVER, gpus=1, cpu="1") for i in range(12)]
    gang_pg = podgroup("ddp", "train", "train", 3)
    gang_pg["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": RACK}
    rec = recorder([
        queue("batch", None, -1), queue("train", None, -1), topology("dc", RACK), *rack_nodes(2, 2, 4),
        *singles, gang_pg, *gang_pods("ddp", "train", 3, arrival_s=3, annotations={}),
    ], policy="spread")  # fmt: skip
    rec.run(2)
    assert all(phase(rec.sim, f"batch/s{i}") == "Running" for i in range(12))
    rec.run(2)
    moves = rec.evictions("consolidate")
    assert len(moves) == 1 and "to free example.com/rack" in moves[0]["message"]
    rec.run(GRACE_S + 2)  # the moved pod has terminated: it and the gang are bound where planned
    racks = {rack_of(rec, f"train/ddp-{i}") for i in range(3)}
    assert len(racks) == 1 and all(phase(rec.sim, f"train/ddp-{i}") == "Running" for i in range(3))
    moved = moves[0]["pod"]
    assert phase(rec.sim, moved) == "Running" and rack_of(rec, moved) not in racks  # where it was planned
    assert rec.sched.cache.state.allocated_milli() == 15000  # 12 singles and 3 gang pods, nothing lost


def test_reclaim_evicts_inside_one_rack_only() -> None:
    """A queue with quota 4 reclaims for a 4-pod gang that must share a rack: the victims are lender pods
    of one rack, the gang runs there."""
    lender = [pod(f"l{i}", "lender", arrival_s=0, duration_s=FOREVER, gpus=1, cpu="1") for i in range(8)]
    gang_pg = podgroup("ddp", "owner", "owner", 4)
    gang_pg["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": RACK}
    rec = recorder([
        queue("lender", None, 0), queue("owner", None, 4), topology("dc", RACK), *rack_nodes(2, 2, 2),
        *lender, gang_pg, *gang_pods("ddp", "owner", 4, arrival_s=3, annotations={}),
    ])  # fmt: skip
    rec.run(GRACE_S + 6)  # the victims terminate before the gang is bound in their place
    racks = {rack_of(rec, f"owner/ddp-{i}") for i in range(4)}
    assert len(racks) == 1 and all(phase(rec.sim, f"owner/ddp-{i}") == "Running" for i in range(4))
    victims = rec.evictions("reclaim")
    assert len(victims) == 4
    assert all(e["beneficiary"] == "owner/ddp" for e in victims)


def test_a_hostile_annotation_is_told_in_one_short_line() -> None:
    """Annotations are not checked by the CRD: any string is a topology no object has, and the message
    quotes it shortened."""
    huge = "z" * 100_000
    rec = recorder([
        queue("queue0", None, -1), topology("dc", RACK), *rack_nodes(1, 1, 2),
        pod("p", "queue0", arrival_s=0, duration_s=FOREVER, gpus=1, cpu="1",
            annotations={"tessera.dev/topology": huge, "tessera.dev/topology-required-placement": "rack"}),
        pod("ok", "queue0", arrival_s=0, duration_s=FOREVER, gpus=1, cpu="1"),
    ])  # fmt: skip
    rec.run(2)
    reason = rec.sim.pods["queue0/p"].reason
    assert reason is not None and reason[0] == Reason.INVALID_TOPOLOGY and len(reason[1]) < 200
    assert phase(rec.sim, "queue0/ok") == "Running"  # the rest goes on


def test_an_elastic_gang_grows_inside_its_rack_and_reclaims_only_there() -> None:
    """An elastic gang (minMember 2 of 4 pods) requiring a rack runs 3 pods in rack1; its 4th waits for
    room in rack1 although rack2 has free GPUs, and reclaim takes its victim in rack1 only (a one-pod plan
    is searched on the nodes the constraint allows: here n1, though n0 comes first and its victim alone
    would make room there)."""
    nodes = [gpu_node("n0", 4, {RACK: "rack2"}), gpu_node("n1", 4, {RACK: "rack1"})]
    batch = [
        pod(f"b{i}", "batch", arrival_s=0, duration_s=FOREVER, gpus=1, cpu="1",
            node_selector={"kubernetes.io/hostname": f"n{i}"})
        for i in range(2)
    ]  # fmt: skip
    gang_pg = podgroup("ddp", "train", "train", 2)
    gang_pg["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": RACK}
    m = Manifests()
    for o in [queue("batch", None, 0), queue("train", None, 4), topology("dc", RACK), *nodes, *batch, gang_pg,
              *gang_pods("ddp", "train", 4, arrival_s=2, annotations={})]:  # fmt: skip
        m.objects[o["kind"]].append(o)
    sim = SimCluster.from_manifests(m)
    config = SchedulerConfig(backend="numpy", actions=("bind_reserved", "allocate", "reclaim"))
    rec = Recorder(sim, Scheduler(sim, config))
    rec.run(3)
    running = [f"train/ddp-{i}" for i in range(4) if phase(rec.sim, f"train/ddp-{i}") == "Running"]
    assert len(running) == 3 and {rack_of(rec, k) for k in running} == {"rack1"}
    (victim,) = rec.evictions("reclaim")
    assert victim["pod"] == "batch/b1" and victim["node"] == "n1"  # rack1's, not b0 on n0
    rec.run(GRACE_S + 2)
    assert {rack_of(rec, f"train/ddp-{i}") for i in range(4)} == {"rack1"}
    assert phase(rec.sim, "batch/b0") == "Running" and rec.evictions("reclaim") == [victim]


def test_reclaim_searches_victims_rack_by_rack() -> None:
    """4 racks of 2 four-GPU nodes full of single lender pods placed round-robin over the racks, so the
    youngest (the first victims in KAI's order) are spread over all four. A gang of 8 requiring a rack
    gets one whole rack's pods evicted, no more: victims are searched rack by rack (searched in plain
    victim order, the work budget ran out while the plan was still being pruned: 11 pods evicted)."""
    nodes = [gpu_node(f"n{r}{i}", 4, {RACK: f"rack{r}"}) for r in range(4) for i in range(2)]
    order = [f"n{r}{i}" for i in range(2) for _ in range(4) for r in range(4)]  # rack by rack, round-robin
    lender = [
        pod(f"l{k:02d}", "lender", arrival_s=k * 0.01, duration_s=FOREVER, gpus=1, cpu="1",
            node_selector={"kubernetes.io/hostname": order[k]})
        for k in range(32)
    ]  # fmt: skip
    gang_pg = podgroup("ddp", "owner", "owner", 8)
    gang_pg["spec"]["topologyConstraint"] = {"topology": "dc", "requiredTopologyLevel": RACK}
    rec = recorder([
        queue("lender", None, 0), queue("owner", None, 8), topology("dc", RACK), *nodes, *lender, gang_pg,
        *gang_pods("ddp", "owner", 8, arrival_s=3, annotations={}),
    ])  # fmt: skip
    rec.run(4)
    victims = rec.evictions("reclaim")
    assert (
        len(victims) == 8
        and len({rec.sim.nodes[e["node"]]["metadata"]["labels"][RACK] for e in victims}) == 1
    )
    rec.run(GRACE_S + 2)
    racks = {rack_of(rec, f"owner/ddp-{i}") for i in range(8)}
    assert len(racks) == 1 and all(phase(rec.sim, f"owner/ddp-{i}") == "Running" for i in range(8))
