"""Model scarcity (`gpuspec*` workloads): capacity of a model that constrained pods need is kept for them."""

from __future__ import annotations

import pytest

from scheduler.model.types import GPUShare, NodeInfo, Placement
from scheduler.placement.filters import feasible
from scheduler.placement.fragfit import FragFitPolicy
from scheduler.placement.placer import place_one
from scheduler.placement.scarcity import PRESSURE_CAP, model_pressure
from scheduler.placement.wastefit import WASTE_WEIGHT, WasteFitPolicy
from scheduler.placement.workload import TaskType, TypicalWorkload
from scheduler.state.backend import namespace
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand


def test_pressure_is_constrained_demand_share_over_capacity_share() -> None:
    wl = TypicalWorkload(
        (TaskType(1000, 1000, 1, ("T4",)), TaskType(1000, 500, 1, ("G2", "T4")), TaskType(1000, 1000, 1)),
        (0.2, 0.2, 0.6),
    )
    # demand per pod: 200 (T4) + 100 (G2|T4, split 2:6 by GPUs) + 600; T4 has 2 of 8 GPUs
    got = model_pressure(wl, {"T4": 2, "G2": 6})
    assert got["T4"] == pytest.approx(((200 + 25) / 900) / (2 / 8))
    assert got["G2"] == pytest.approx((75 / 900) / (6 / 8))
    only = TypicalWorkload((TaskType(1000, 1000, 1, ("T4",)),), (1.0,))
    assert model_pressure(only, {"T4": 1, "G2": 9})["T4"] == PRESSURE_CAP
    assert model_pressure(TypicalWorkload((TaskType(1000, 1000, 1),), (1.0,)), {"T4": 2}) == {}


def _cluster(backend: str) -> ClusterState:
    state = ClusterState(namespace(backend), max_gpus=2, capacity=4)
    for name, model in (("a-t4", "T4"), ("b-g2", "G2")):
        state.add_node(
            NodeInfo(
                name=name,
                cpu_milli=32000,
                memory_mib=65536,
                gpu_count=2,
                gpu_model=model,
                gpu_memory_mib=16000,
            )
        )
    state.commit()
    return state


@pytest.mark.parametrize("backend", ["numpy", "strict"])
@pytest.mark.parametrize("policy_type", [FragFitPolicy, WasteFitPolicy])
def test_unconstrained_pods_leave_the_scarce_model_alone(
    backend: str, policy_type: type[FragFitPolicy]
) -> None:
    constrained = TypicalWorkload(
        (TaskType(1000, 1000, 1, ("T4",)), TaskType(1000, 1000, 1), TaskType(1000, 500, 1)), (0.4, 0.4, 0.2)
    )
    pod = PodDemand(cpu_milli=1000, num_gpus=1, gpu_milli=1000)
    for workload, want in ((constrained, "b-g2"), (None, "a-t4")):  # equal nodes: first row
        state = _cluster(backend)
        policy = policy_type()
        if workload is not None:
            policy.set_typical_workload(workload)
        else:
            policy.set_typical_workload(TypicalWorkload(constrained.types[1:], (0.6, 0.4)))
        p = place_one(state, policy, pod)
        assert p is not None
        assert state.node_names[p.node] == want
    # a pod that accepts only T4 still goes there
    state = _cluster(backend)
    policy = policy_type()
    policy.set_typical_workload(constrained)
    p = place_one(
        state,
        policy,
        PodDemand(cpu_milli=1000, num_gpus=1, gpu_milli=1000, models=frozenset({"T4"})),
    )
    assert p is not None and state.node_names[p.node] == "a-t4"


def _t4_gap_cluster(backend: str) -> ClusterState:
    """A T4 node whose first GPU has a 600-milli gap (400 used) and a fresh G2 node, two GPUs each."""
    state = _cluster(backend)
    state.place(Placement(0, (GPUShare(0, 400, 0),), 0, 0))
    state.commit()
    return state


def _overflowing(t4_share: float) -> TypicalWorkload:
    """T4-only whole GPUs (`t4_share` of pods) and unconstrained 600s; T4 is half the GPUs of
    `_t4_gap_cluster`, so its pressure is (1000 t4_share / demand) / 0.5."""
    return TypicalWorkload(
        (TaskType(1000, 1000, 1, ("T4",)), TaskType(1000, 600, 1)), (t4_share, 1.0 - t4_share)
    )


FRACTION = PodDemand(cpu_milli=1000, num_gpus=1, gpu_milli=600)


@pytest.mark.parametrize("backend", ["numpy", "strict"])
def test_a_fraction_leaves_a_model_its_pinned_pods_overflow(backend: str) -> None:
    """Pressure 1.875 (T4-only demand beyond T4's capacity): filling the T4 gap exactly saves the waste
    of a 400 nothing fills, but every milli taken there is one the T4 pods miss. Without the overflow
    charge the waste term outweighs the scarcity charge and the fraction fills the T4 gap (the gpuspec33
    failure); with it, the fraction opens a G2 GPU."""
    wl = _overflowing(0.9)
    assert model_pressure(wl, {"T4": 2, "G2": 2})["T4"] == pytest.approx(1.875)
    picks = []
    for weight in (0.0, 1.0):
        state = _t4_gap_cluster(backend)
        policy = WasteFitPolicy(overflow_weight=weight)
        policy.set_typical_workload(wl)
        p = place_one(state, policy, FRACTION)
        assert p is not None
        picks.append(state.node_names[p.node])
    assert picks == ["a-t4", "b-g2"]


def _scores(backend: str, wl: TypicalWorkload, weight: float, d: PodDemand) -> list[float]:
    state = _t4_gap_cluster(backend)
    policy = WasteFitPolicy(overflow_weight=weight)
    policy.set_typical_workload(wl)
    mask, fit = feasible(state, d)
    return [float(s) for s in policy.score_nodes(state, d, mask, fit)]


@pytest.mark.parametrize("backend", ["numpy", "strict"])
def test_overflow_charge_grows_with_the_overflow_and_is_nothing_without_one(backend: str) -> None:
    """The charge is waste_weight x min(1, pressure - 1) x milli taken, on the overflowing model's rows
    only; at pressure <= 1, or without pinned types, scores are exactly those without the rule."""
    charges = []
    for t4_share in (0.7, 0.8, 0.9):  # pressure 1.59, 1.74, 1.875
        wl = _overflowing(t4_share)
        pressure = model_pressure(wl, {"T4": 2, "G2": 2})["T4"]
        off, on = _scores(backend, wl, 0.0, FRACTION), _scores(backend, wl, 1.0, FRACTION)
        assert on[1] == off[1]  # G2 is not overflowed
        assert off[0] - on[0] == pytest.approx(WASTE_WEIGHT * (pressure - 1.0) * 600)
        charges.append(off[0] - on[0])
    assert charges == sorted(charges) and charges[0] > 0
    for wl in (
        _overflowing(0.3),
        TypicalWorkload((TaskType(1000, 1000, 1), TaskType(1000, 600, 1)), (0.5, 0.5)),
    ):
        assert model_pressure(wl, {"T4": 2, "G2": 2}).get("T4", 0.0) <= 1.0
        assert _scores(backend, wl, 1.0, FRACTION) == _scores(backend, wl, 0.0, FRACTION)
    # whole-GPU pods are charged inside the sigmoid only, as in fragfit
    whole = PodDemand(cpu_milli=1000, num_gpus=1, gpu_milli=1000)
    wl = _overflowing(0.9)
    assert _scores(backend, wl, 1.0, whole) == _scores(backend, wl, 0.0, whole)
