"""wastefit: the expected-waste table, scarcity, GPU choice, cache exactness and backend parity."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from scheduler.model.types import GPUShare, NodeInfo, Placement
from scheduler.placement.fragfit import FragFitPolicy
from scheduler.placement.placer import place_one
from scheduler.placement.registry import make_policy
from scheduler.placement.wastefit import WasteFitPolicy, availability, expected_waste
from scheduler.placement.workload import TaskType, TypicalWorkload
from scheduler.replay.protocol import (
    arrival_order,
    build_state,
    capacity_milli,
    replay_seed,
    typical_workload,
)
from scheduler.replay.trace import load_nodes, load_pods
from scheduler.state.backend import namespace
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

# 810s leave 190 that only the rare 160s fill; 470s pair with each other; 320s pair with the 650s' 350.
SIZES = {810: 0.3, 470: 0.3, 650: 0.1, 320: 0.1, 160: 0.02}


def test_waste_is_at_most_the_gap_and_all_of_a_gap_nothing_fits() -> None:
    w = expected_waste(SIZES, eps=0.003)
    assert w[0] == 0.0
    assert all(0.0 <= w[h] <= h for h in range(1001))
    assert all(w[h] == h for h in range(160))  # smaller than every size: dead
    assert w[530] < 120  # a 470 is likely to come and leave 60
    assert w[190] > 120  # only the scarce 160s fit, and 810s leave many such gaps
    assert w[350] < w[210]  # 350 awaits a 320 (30 left); 210 awaits a scarce 160


def test_shorter_horizon_means_more_waste() -> None:
    patient, hurried = expected_waste(SIZES, eps=0.001), expected_waste(SIZES, eps=0.05)
    assert all(patient[h] <= hurried[h] + 1e-9 for h in range(1001))
    assert hurried[530] > patient[530] + 20


def test_sizes_claimed_by_more_gaps_than_arrive_are_scarce() -> None:
    avail = availability(SIZES)
    assert avail[160] == pytest.approx(0.02 / 0.3)  # every 810 wants one
    assert avail[470] == 1.0 and avail[810] == 1.0


def _node_with(backend: str, used: list[int]) -> ClusterState:
    xp = namespace(backend)
    state = ClusterState(xp, max_gpus=len(used), capacity=1)
    row = state.add_node(NodeInfo("n", 64000, 262144, len(used), "T4", 15109))
    shares = tuple(GPUShare(i, u, 0) for i, u in enumerate(used) if u)
    state.place(Placement(row, shares, 0, 0))
    state.commit()
    return state


def _workload() -> TypicalWorkload:
    types = (*(TaskType(1000, s, 1) for s in SIZES), TaskType(1000, 1000, 1))
    weights = (*SIZES.values(), 1.0 - sum(SIZES.values()))
    return TypicalWorkload(types, weights)


@pytest.mark.parametrize("backend", ["numpy", "strict"])
def test_320_leaves_a_470_gap_alone_but_fills_a_650_gap(backend: str) -> None:
    """GPUs free: 1000, 530 (a 470's leftover). fragfit fills the 530 (210 left, dead); wastefit opens
    the whole GPU (680 left, a 650 fits). With a 350 gap too, both take the 350 (30 left)."""
    pod = PodDemand(cpu_milli=1000, num_gpus=1, gpu_milli=320)
    for used, want_fragfit, want_wastefit in (([0, 470], 1, 0), ([0, 470, 650], 2, 2)):
        picks = []
        for policy in (FragFitPolicy(), WasteFitPolicy()):
            state = _node_with(backend, used)
            policy.set_typical_workload(_workload())
            p = place_one(state, policy, pod)
            assert p is not None
            picks.append(p.gpus[0].slot)
        assert picks == [want_fragfit, want_wastefit]


@pytest.mark.parametrize("backend", ["numpy", "strict"])
def test_tiny_pod_goes_on_the_810_leftover(backend: str) -> None:
    state = _node_with(backend, [0, 810, 470])
    policy = WasteFitPolicy()
    policy.set_typical_workload(_workload())
    p = place_one(state, policy, PodDemand(cpu_milli=1000, num_gpus=1, gpu_milli=160))
    assert p is not None and p.gpus[0].slot == 1


def test_numpy_and_strict_place_identically(trace: tuple[Path, Path]) -> None:
    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    runs = []
    for backend in ("numpy", "strict"):
        xp = namespace(backend)
        state = build_state(xp, nodes)
        policy = WasteFitPolicy()
        policy.set_typical_workload(typical_workload(pods, policy.coverage))
        rng = random.Random(3)
        out = []
        for pod in arrival_order(pods, 42, 1.3, capacity_milli(nodes)):
            p = place_one(state, policy, pod.demand(), tie_break="random", rng=rng)
            out.append(None if p is None else (p.node, tuple(s.slot for s in p.gpus)))
            if p is not None:
                state.place(p)
                state.commit()
        runs.append(out)
    assert runs[0] == runs[1]
    assert any(d is None for d in runs[0]) and any(d is not None for d in runs[0])


def test_cache_changes_nothing(trace: tuple[Path, Path]) -> None:
    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    runs = []
    for no_cache in (False, True):
        xp = namespace("numpy")
        state = build_state(xp, nodes)
        policy = WasteFitPolicy()
        policy.set_typical_workload(typical_workload(pods, policy.coverage))
        out = []
        for pod in arrival_order(pods, 5, 1.3, capacity_milli(nodes)):
            if no_cache:
                policy._cache.clear()
            p = place_one(state, policy, pod.demand())
            out.append(None if p is None else (p.node, tuple(s.slot for s in p.gpus)))
            if p is not None:
                state.place(p)
                state.commit()
        runs.append(out)
    assert runs[0] == runs[1]


def test_registered_and_replays(trace: tuple[Path, Path]) -> None:
    assert make_policy("wastefit").name == "wastefit"
    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    result = replay_seed(namespace("numpy"), nodes, pods, "wastefit", 42)
    assert 0 < result.failed < result.attempted


@pytest.mark.parametrize("backend", ["numpy", "strict"])
def test_best_fit_blend_is_the_raw_best_fit_score_of_each_row(trace: tuple[Path, Path], backend: str) -> None:
    """The blend is best fit's raw score x pull / 100 on each row: the policy's score without it plus
    that. It depends on the row alone (no min-max normalisation over the feasible rows), so it sits in
    the cached scores, refreshed row by row (`test_cache_changes_nothing`): nothing over all rows per
    decision."""
    from scheduler.placement.bestfit import _free_gpu_milli, _raw
    from scheduler.placement.filters import feasible

    nodes, pods = load_nodes(trace[0]).rows, load_pods(trace[1]).rows
    xp = namespace(backend)
    state = build_state(xp, nodes)
    workload = typical_workload(pods, 1.0)
    blended, plain = WasteFitPolicy(), WasteFitPolicy(pull=0.0)
    for policy in (blended, plain):
        policy.set_typical_workload(workload)
    checked = 0
    for pod in arrival_order(pods, 7, 1.3, capacity_milli(nodes)):
        d = pod.demand()
        mask, fit = feasible(state, d)
        got = blended.score_nodes(state, d, mask, fit)
        base = plain.score_nodes(state, d, mask, fit)
        raw = _raw(xp, state.free_cpu, _free_gpu_milli(state), d)
        for r in range(0, int(state.capacity), 7):
            if math.isfinite(float(base[r])):
                assert float(got[r]) == pytest.approx(float(base[r]) + float(raw[r]) / 100.0, abs=1e-9)
                checked += 1
        p = place_one(state, blended, d)
        if p is None:
            break
        state.place(p)
        state.commit()
    assert checked > 100
