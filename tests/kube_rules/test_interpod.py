"""Inter-pod affinity, anti-affinity and topology spread through the real cycle on the simulated cluster:
pods placed earlier in the same cycle count (a gang's members see each other), a rolled-back placement
counts no more, a relabelled pod is counted by its new labels."""

from __future__ import annotations

from typing import Any

from scheduler.cache.cluster import WatchEvent
from tests.framework.helpers import A100, cluster, node, phase, pod, podgroup, queue, run

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def _nodes(n: int, zones: list[str], cpu: int = 32) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        obj = node(f"n{i}", A100, 0, cpu, 256)
        obj["metadata"]["labels"].update({HOST: f"n{i}", ZONE: zones[i % len(zones)]})
        obj["status"]["capacity"]["pods"] = "110"
        out.append(obj)
    return out


def _with(p: dict[str, Any], app: str, affinity: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    p["metadata"]["labels"]["app"] = app
    if affinity:
        p["spec"]["affinity"] = affinity
    p["spec"].update(spec)
    return p


def _term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def _where(sim: Any, names: list[str]) -> dict[str, str | None]:
    return {n: sim.pods[n].obj["spec"].get("nodeName") for n in names}


def test_a_required_anti_affinity_deployment_takes_one_node_each_and_the_rest_wait() -> None:
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("web", HOST)]}}
    pods = [_with(pod(f"web-{i}", "team", arrival_s=0, duration_s=600, cpu="1", memory="1Gi"), "web", anti)
            for i in range(4)]  # fmt: skip
    sim, sched = cluster([*_nodes(3, ["a"]), queue("team", None, 0), *pods])
    run(sim, sched, cycles=2)
    where = _where(sim, [f"team/web-{i}" for i in range(4)])
    placed = [n for n in where.values() if n]
    assert sorted(placed) == ["n0", "n1", "n2"]
    waiting = next(k for k, v in where.items() if v is None)
    reason = sim.pods[waiting].reason
    assert reason is not None and "3 node(s) didn't match pod anti-affinity rules" in reason[1], reason


def test_a_gangs_members_placed_in_the_same_cycle_satisfy_their_affinity_to_each_other() -> None:
    """A gang of 3 that must share a zone, on 3 zones of 2 small nodes: the first member goes anywhere (no
    such pod exists yet), the next ones see it, placed earlier in the same transaction."""
    together = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("trainer", ZONE)]}}
    members = []
    for i in range(3):
        p = pod(f"t-{i}", "team", arrival_s=0, duration_s=600, cpu="2", memory="1Gi",
                annotations={"tessera.dev/pod-group": "job"})  # fmt: skip
        members.append(_with(p, "trainer", together))
    sim, sched = cluster([*_nodes(6, ["a", "b", "c"], cpu=4), queue("team", None, 0),
                          podgroup("job", "team", "team", 3), *members])  # fmt: skip
    run(sim, sched, cycles=2)
    where = _where(sim, [f"team/t-{i}" for i in range(3)])
    assert all(where.values()), where
    zones = {sim.nodes[n]["metadata"]["labels"][ZONE] for n in where.values() if n}
    assert len(zones) == 1, where


def test_a_gang_that_does_not_fit_leaves_no_count_behind() -> None:
    """A gang of 3 anti-affine by host on 2 nodes cannot be placed whole: its transaction is rolled back,
    and so are its members' counts (a single pod of the same app then goes anywhere)."""
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("ps", HOST)]}}
    members = [_with(pod(f"ps-{i}", "team", arrival_s=0, duration_s=600, cpu="1", memory="1Gi",
                         annotations={"tessera.dev/pod-group": "job"}), "ps", anti) for i in range(3)]  # fmt: skip
    sim, sched = cluster(
        [*_nodes(2, ["a"]), queue("team", None, 0), podgroup("job", "team", "team", 3), *members]
    )
    run(sim, sched, cycles=2)
    assert all(phase(sim, f"team/ps-{i}") == "Pending" for i in range(3))
    topo = sched.cache.pod_topology
    assert all(not rows for rows in topo.counts.values()), topo.counts

    assert not topo.holders  # no pod holds a place: none of their anti-affinity terms is counted


def test_a_relabelled_pod_is_counted_by_its_new_labels() -> None:
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("web", HOST)]}}
    first = _with(pod("a", "team", arrival_s=0, duration_s=600, cpu="1", memory="1Gi"), "web")
    sim, sched = cluster([*_nodes(1, ["a"]), queue("team", None, 0), first])
    run(sim, sched, cycles=2)
    assert phase(sim, "team/a") == "Running"
    late = _with(pod("b", "team", arrival_s=0, duration_s=600, cpu="1", memory="1Gi"), "other", anti)
    sim.submit_pod(late)
    run(sim, sched, cycles=1)
    assert phase(sim, "team/b") == "Pending"  # "a" is a web pod on the only node
    relabelled = sim.pods["team/a"].obj
    relabelled["metadata"]["labels"]["app"] = "api"
    sched.cache.apply([WatchEvent("Pod", "MODIFIED", relabelled)])
    run(sim, sched, cycles=1)
    assert phase(sim, "team/b") == "Running"
