"""fgd through the incremental placer, with its caches (partial refresh, cached free GPU milli), decides
exactly as a fresh policy that scores every node from scratch at each step."""

import random

import pytest

from scheduler.model.types import NodeInfo
from scheduler.placement.bestfit import _free_gpu_milli, _raw
from scheduler.placement.fgd import FgdPolicy
from scheduler.placement.filters import feasible
from scheduler.placement.incremental import IncrementalPlacer
from scheduler.placement.placer import place_one
from scheduler.placement.wastefit import WasteFitPolicy
from scheduler.placement.workload import TypicalWorkload
from scheduler.state import ClusterState, PodDemand
from scheduler.state.backend import get_namespace


def demands(rng):
    return [
        PodDemand(
            cpu_milli=rng.choice([2000, 4000, 8000]), num_gpus=1, gpu_milli=rng.choice([230, 470, 650, 810])
        ),
        PodDemand(cpu_milli=rng.choice([4000, 8000]), num_gpus=rng.choice([1, 1, 2, 8]), gpu_milli=1000),
        PodDemand(cpu_milli=2000),
    ]


@pytest.mark.parametrize("backend", ["numpy", "strict"])
def test_fgd_incremental_equals_fresh(backend):
    rng = random.Random(8)
    xp = get_namespace(backend)
    ref, inc = ClusterState(xp, max_gpus=8, capacity=80), ClusterState(xp, max_gpus=8, capacity=80)
    for i in range(72):  # above the 64 rows from which free GPU milli is cached
        n = NodeInfo(f"n{i}", 96000, 393216, rng.choice([2, 4, 8]), rng.choice(["G2", "T4"]), 16384)
        ref.add_node(n)
        inc.add_node(n)
    workload = TypicalWorkload.from_demands(d for _ in range(40) for d in demands(rng))
    cached = FgdPolicy()
    cached.set_typical_workload(workload)
    placer = IncrementalPlacer(inc, cached)
    for step in range(70):
        d = rng.choice(demands(rng))
        fresh = FgdPolicy()
        fresh.set_typical_workload(workload)
        want, got = place_one(ref, fresh, d), placer.place(d)
        assert want == got, step
        if want is not None:
            ref.place(want)
            inc.place(got)
        # the caches behind the tie-break (patched rows) equal a computation from scratch
        bestfit = cached._bestfit
        assert inc.host(bestfit.free_gpu_milli(inc)).tolist() == inc.host(_free_gpu_milli(inc)).tolist()
        direct = _raw(xp, inc.free_cpu, _free_gpu_milli(inc), d)
        assert inc.host(bestfit.raw_scores(inc, d)).tolist() == inc.host(direct).tolist()


@pytest.mark.parametrize("policy", [FgdPolicy, WasteFitPolicy])
def test_a_fraction_goes_on_the_gpu_its_score_came_from(policy):
    """The GPU a fragment policy picks for a fraction comes from its score cache (the argmax the node's
    score was made of): it is the GPU a policy with nothing cached derives for that node."""
    rng = random.Random(11)
    xp = get_namespace("numpy")
    state = ClusterState(xp, max_gpus=8, capacity=80)
    for i in range(72):
        state.add_node(
            NodeInfo(f"n{i}", 96000, 393216, rng.choice([2, 4, 8]), rng.choice(["G2", "T4"]), 16384)
        )
    workload = TypicalWorkload.from_demands(d for _ in range(40) for d in demands(rng))
    cached = policy()
    cached.set_typical_workload(workload)
    placer = IncrementalPlacer(state, cached)
    fractions = 0
    for step in range(120):
        d = rng.choice(demands(rng))
        got = placer.place(d)
        if got is None:
            continue
        if d.num_gpus == 1 and d.gpu_milli < 1000:
            fractions += 1
            blank = policy()
            blank.set_typical_workload(workload)
            _, fit = feasible(state, d)
            assert blank.pick_gpus(state, got.node, d, fit) == [g.slot for g in got.gpus], step
        state.place(got)
    assert fractions > 20
