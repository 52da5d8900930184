"""Every replay policy: same decisions on numpy and array-api-strict, registered, and (FGD) cache-exact."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from scheduler.placement.fgd import FgdPolicy
from scheduler.placement.placer import place_one
from scheduler.placement.registry import make_policy, policy_names
from scheduler.replay.protocol import (
    arrival_order,
    build_state,
    capacity_milli,
    replay_seed,
    typical_workload,
)
from scheduler.replay.trace import load_nodes, load_pods
from scheduler.state.backend import namespace

POLICIES = ["random", "dotprod", "packing", "bestfit", "fgd", "fgd-name", "fragfit", "wastefit"]


def test_all_replay_policies_registered() -> None:
    assert set(POLICIES) <= set(policy_names())
    for name in POLICIES:
        assert make_policy(name).name == name


@pytest.mark.parametrize("policy", POLICIES)
def test_numpy_and_strict_place_identically(trace: tuple[Path, Path], policy: str) -> None:
    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    a = replay_seed(namespace("numpy"), nodes, pods, policy, 42)
    b = replay_seed(namespace("strict"), nodes, pods, policy, 42)
    assert a.failed == b.failed
    assert a.curve == b.curve


def _decisions(
    trace: tuple[Path, Path], policy: FgdPolicy, *, no_cache: bool
) -> list[tuple[int, tuple[int, ...]] | None]:
    xp = namespace("numpy")
    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    state = build_state(xp, nodes)
    policy.set_typical_workload(typical_workload(pods))
    rng = random.Random(5)
    out: list[tuple[int, tuple[int, ...]] | None] = []
    for pod in arrival_order(pods, 3, 1.3, capacity_milli(nodes)):
        if no_cache:
            policy._cache.clear()
        p = place_one(state, policy, pod.demand(), tie_break="random", rng=rng)
        out.append(None if p is None else (p.node, tuple(s.slot for s in p.gpus)))
        if p is not None:
            state.place(p)
            state.commit()
    return out


def test_fgd_cache_and_node_collapse_change_nothing(trace: tuple[Path, Path]) -> None:
    cached = _decisions(trace, FgdPolicy(), no_cache=False)
    fresh = _decisions(trace, FgdPolicy(), no_cache=True)
    assert cached == fresh
    assert any(d is None for d in cached) and any(d is not None for d in cached)


@pytest.mark.parametrize("backend", ["numpy", "strict"])
def test_collapsed_full_refresh_equals_row_by_row(trace: tuple[Path, Path], backend: str) -> None:
    xp = namespace(backend)
    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    state = build_state(xp, nodes)
    policy = FgdPolicy()
    policy.set_typical_workload(typical_workload(pods))
    for pod in arrival_order(pods, 9, 1.0, capacity_milli(nodes))[:40]:
        d = pod.demand()
        wa = policy._workload_arrays(state)
        view = policy.view(state, wa, d)
        full, _ = policy._full(xp, wa, view, d)
        direct = policy.kernel(xp, wa, view, d)
        assert [float(v) for v in full] == [float(v) for v in direct]
        p = place_one(state, policy, d)
        if p is not None:
            state.place(p)


def test_fgd_picks_the_gpu_that_fragments_least() -> None:
    """One node, GPUs with 1000 / 500 / 300 free, typical work 300-milli fractions and whole GPUs: a
    300-milli pod belongs on the 300 GPU, a 500-milli pod on the 500 GPU (the free GPU stays whole)."""
    from scheduler.model.types import GPUShare, NodeInfo, Placement
    from scheduler.placement.workload import TaskType, TypicalWorkload
    from scheduler.state.cluster_state import ClusterState
    from scheduler.state.demand import PodDemand

    xp = namespace("numpy")
    state = ClusterState(xp, max_gpus=3, capacity=1)
    row = state.add_node(NodeInfo("n", 64000, 262144, 3, "T4", 15109))
    state.place(Placement(row, (GPUShare(1, 500, 0), GPUShare(2, 700, 0)), 0, 0))
    policy = FgdPolicy()
    policy.set_typical_workload(
        TypicalWorkload((TaskType(1000, 300, 1), TaskType(1000, 1000, 1)), (0.5, 0.5))
    )
    for milli, slot in ((300, 2), (500, 1)):
        p = place_one(state, policy, PodDemand(cpu_milli=1000, num_gpus=1, gpu_milli=milli))
        assert p is not None and [s.slot for s in p.gpus] == [slot]


def test_fgd_name_breaks_ties_by_node_name_as_the_simulator() -> None:
    """Equal FGD scores: `fgd-name` takes the node whose name sorts first (rows follow names in the
    replay), `fgd` the best fit (here the node with less free CPU)."""
    from scheduler.placement.fgd import FgdNameOrderPolicy
    from scheduler.replay.trace import TraceNode
    from scheduler.state.demand import PodDemand

    xp = namespace("numpy")
    nodes = [
        TraceNode(sn="b-node", cpu_milli=16000, memory_mib=65536, gpu=2, model="G2"),
        TraceNode(sn="a-node", cpu_milli=32000, memory_mib=65536, gpu=2, model="G2"),
    ]
    state = build_state(xp, nodes)
    assert state.node_names[:2] == ["a-node", "b-node"]
    pod = PodDemand(cpu_milli=1000, memory_mib=1024, num_gpus=1, gpu_milli=1000)
    from scheduler.placement.workload import TaskType, TypicalWorkload

    wl = TypicalWorkload((TaskType(1000, 1000, 1),), (1.0,))
    picks = []
    for policy in (FgdNameOrderPolicy(), FgdPolicy()):
        policy.set_typical_workload(wl)
        p = place_one(build_state(xp, nodes), policy, pod, tie_break="random", rng=random.Random(1))
        assert p is not None
        picks.append(state.node_names[p.node])
    assert picks == ["a-node", "b-node"]
