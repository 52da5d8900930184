"""Model scarcity (`gpuspec*` workloads): capacity of a model that constrained pods need is kept for them."""

from __future__ import annotations

import pytest

from scheduler.backend import namespace
from scheduler.model import NodeInfo
from scheduler.placement.fragfit import FragFitPolicy
from scheduler.placement.placer import place_one
from scheduler.placement.scarcity import PRESSURE_CAP, model_pressure
from scheduler.placement.wastefit import WasteFitPolicy
from scheduler.placement.workload import TaskType, TypicalWorkload
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
