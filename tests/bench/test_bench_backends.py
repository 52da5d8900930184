"""The incremental placer and the bulk state updates on every array backend give numpy's decisions.

Runs numpy and array-api-strict everywhere; CuPy too when `TESSERA_ARRAY_BACKEND=cupy` and a GPU is
usable (scripts/gpu_check.sh does that on a GPU machine).
"""

import os
import random

import pytest

from scheduler.bench.runner import BenchConfig, run_bench
from scheduler.model.types import GPUShare, NodeInfo, Placement
from scheduler.placement import make_policy
from scheduler.placement.incremental import IncrementalPlacer
from scheduler.state import ClusterState, PodDemand
from scheduler.state.backend import cupy_usable, get_namespace

BACKENDS = ["strict"] + (
    ["cupy"] if os.environ.get("TESSERA_ARRAY_BACKEND") == "cupy" and cupy_usable() else []
)


def decisions(backend, policy, seed=3, steps=120):
    rng = random.Random(seed)
    xp = get_namespace(backend)
    s = ClusterState(xp, max_gpus=8, capacity=4)
    for i in range(16):
        s.add_node(
            NodeInfo(
                f"n{i}", 64000, 262144, rng.choice([4, 8]), rng.choice(["A", "B"]), rng.choice([16384, 81920])
            )
        )
    placer = IncrementalPlacer(s, make_policy(policy))
    out = []
    for _ in range(steps):
        d = rng.choice([
            PodDemand(cpu_milli=2000, memory_mib=4096, num_gpus=1, gpu_milli=rng.choice([50, 320, 470, 810])),
            PodDemand(cpu_milli=4000, num_gpus=rng.choice([1, 2, 4, 8]), gpu_milli=1000),
            PodDemand(cpu_milli=1000, num_gpus=1, gpu_mib=8000),
            PodDemand(cpu_milli=8000, memory_mib=16384),
        ])  # fmt: skip
        pl = placer.place(d)
        out.append(pl)
        if pl is not None:
            s.place(pl)
    return out, s.allocated_milli()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_placer_same_decisions_as_numpy(backend, policy):
    assert decisions(backend, policy) == decisions("numpy", policy)


@pytest.mark.parametrize("backend", BACKENDS)
def test_apply_many_same_as_numpy(backend):
    rng = random.Random(9)
    pls = [Placement(rng.randrange(5), (GPUShare(rng.randrange(4), 30, 60),), 10, 10) for _ in range(50)]
    result = {}
    for name in ("numpy", backend):
        xp = get_namespace(name)
        s = ClusterState(xp, max_gpus=4, capacity=8)
        for i in range(5):
            s.add_node(NodeInfo(f"n{i}", 8000, 8192, 4, "A", 16384))
        s.apply_many(pls)
        result[name] = (
            s.host(s.free_milli).tolist(),
            s.host(s.free_mib).tolist(),
            s.host(s.free_cpu).tolist(),
        )
    assert result[backend] == result["numpy"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_bench_on_backend_schedules_as_numpy(backend):
    cfg = dict(nodes=10, gpus_per_node=8, init_pods=10, pods=40, gangs=0.2, batch=20)
    got = run_bench(BenchConfig(**cfg, backend=backend)).to_dict()
    ref = run_bench(BenchConfig(**cfg, backend="numpy")).to_dict()
    assert got["backend"] == backend and got["scheduled"] == ref["scheduled"]
