"""fgd through the incremental placer, with its caches (partial refresh, cached free GPU milli), decides
exactly as a fresh policy that scores every node from scratch at each step."""

import random

import pytest

from scheduler.backend import get_namespace
from scheduler.model import NodeInfo
from scheduler.placement.bestfit import _free_gpu_milli, _raw
from scheduler.placement.fgd import FgdPolicy
from scheduler.placement.incremental import IncrementalPlacer
from scheduler.placement.placer import place_one
from scheduler.placement.workload import TypicalWorkload
from scheduler.state import ClusterState, PodDemand


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
