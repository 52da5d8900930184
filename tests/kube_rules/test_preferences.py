"""kube-scheduler's default scores where users notice them, blended with the placement policy: preferred
node affinity, ScheduleAnyway spread, PreferNoSchedule taints and preferred pod affinity lead for pods
without GPUs; for GPU pods the policy stays the main signal."""

from __future__ import annotations

from typing import Any

from tests.framework.helpers import A100, cluster, node, pod, queue, run

ZONE = "topology.kubernetes.io/zone"


def _nodes(
    zones: list[str], gpus: int = 0, taints: dict[int, list[dict[str, str]]] | None = None
) -> list[dict[str, Any]]:
    out = []
    for i, zone in enumerate(zones):
        n = node(f"n{i}", A100, gpus, 32, 256)
        n["metadata"]["labels"].update({"kubernetes.io/hostname": f"n{i}", ZONE: zone})
        if taints and i in taints:
            n["spec"] = {"taints": taints[i]}
        out.append(n)
    return out


def _where(sim: Any, names: list[str]) -> list[str | None]:
    return [sim.pods[n].obj["spec"].get("nodeName") for n in names]


def _web(name: str, **spec: Any) -> dict[str, Any]:
    p = pod(name, "team", arrival_s=0, duration_s=600, cpu="1", memory="1Gi")
    p["metadata"]["labels"]["app"] = "web"
    p["spec"].update(spec)
    return p


def test_a_pod_goes_to_the_node_its_preferred_affinity_names() -> None:
    prefer_c = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["c"]}]}}]}}  # fmt: skip
    sim, sched = cluster([*_nodes(["a", "b", "c"]), queue("team", None, 0), _web("p", affinity=prefer_c)])
    run(sim, sched, cycles=2)
    assert _where(sim, ["team/p"]) == ["n2"]


def test_schedule_anyway_spread_puts_replicas_across_zones() -> None:
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
               "labelSelector": {"matchLabels": {"app": "web"}}}]  # fmt: skip
    pods = [_web(f"w{i}", topologySpreadConstraints=spread) for i in range(6)]
    sim, sched = cluster([*_nodes(["a", "b", "c"]), queue("team", None, 0), *pods])
    run(sim, sched, cycles=2)
    where = _where(sim, [f"team/w{i}" for i in range(6)])
    assert sorted(where) == ["n0", "n0", "n1", "n1", "n2", "n2"], where  # binpack alone packs one node


def test_a_prefer_no_schedule_taint_keeps_pods_off_while_others_have_room() -> None:
    spot = {0: [{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]}
    sim, sched = cluster([*_nodes(["a", "a"], taints=spot), queue("team", None, 0), _web("p")])
    run(sim, sched, cycles=2)
    assert _where(sim, ["team/p"]) == ["n1"]


def test_a_pod_goes_next_to_the_pods_its_preferred_affinity_names() -> None:
    cache = pod(
        "cache", "team", arrival_s=0, duration_s=600, cpu="1", memory="1Gi", node_selector={ZONE: "b"}
    )
    cache["metadata"]["labels"]["app"] = "cache"
    near = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
        "labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}}]}}  # fmt: skip
    sim, sched = cluster([*_nodes(["a", "b"]), queue("team", None, 0), cache])
    run(sim, sched, cycles=2)
    sim.submit_pod(_web("p", affinity=near))
    run(sim, sched, cycles=2)
    assert _where(sim, ["team/cache", "team/p"]) == ["n1", "n1"]


def test_for_gpu_pods_the_policy_stays_the_main_signal() -> None:
    """A half-GPU pod preferring zone b still goes where binpack puts it (next to the other half on n0's
    GPU): a preference breaks near-ties of the policy, it does not undo its packing."""
    first = pod("first", "team", arrival_s=0, duration_s=600, annotations={"gpu-fraction": "0.5"})
    prefer_b = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["b"]}]}}]}}  # fmt: skip
    sim, sched = cluster([*_nodes(["a", "b"], gpus=1), queue("team", None, 2), first])
    run(sim, sched, cycles=2)
    assert _where(sim, ["team/first"]) == ["n0"]
    second = pod("second", "team", arrival_s=0, duration_s=600, annotations={"gpu-fraction": "0.5"})
    second["spec"]["affinity"] = prefer_b
    sim.submit_pod(second)
    run(sim, sched, cycles=2)
    assert _where(sim, ["team/second"]) == ["n0"]
