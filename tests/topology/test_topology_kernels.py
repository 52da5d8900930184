"""The topology kernels (`scheduler/placement/topology.py`) and the domain columns of the state
(`scheduler/state/domains.py`): identical answers on numpy and array-api-strict, equal to plain Python."""

from __future__ import annotations

import random

import numpy as np
import pytest

from scheduler.model.types import NodeInfo
from scheduler.placement.filters import feasible, gpu_need
from scheduler.placement.topology import (
    ancestors,
    domain_runs,
    dominant_ratio,
    order_by,
    pods_per_node,
    run_sums,
    segment_sum,
    split_levels,
)
from scheduler.state import ClusterState, PodDemand
from scheduler.state.backend import get_namespace, to_numpy

BACKENDS = ["numpy", "strict"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(5))
def test_segment_sum_is_a_grouped_sum(backend: str, seed: int) -> None:
    rng = random.Random(seed)
    xp = get_namespace(backend)
    n, size = rng.randint(1, 60), rng.randint(1, 12)
    codes = [rng.randint(-1, size - 1) for _ in range(n)]  # -1: outside every domain
    values = [[rng.randint(0, 9) for _ in range(3)] for _ in range(n)]
    want = [
        [sum(v[k] for c, v in zip(codes, values, strict=True) if c == d) for k in range(3)]
        for d in range(size)
    ]
    got = segment_sum(xp, xp.asarray(codes, dtype=xp.int32), xp.asarray(values, dtype=xp.int64), size)
    assert to_numpy(got).tolist() == want
    one = segment_sum(
        xp, xp.asarray(codes, dtype=xp.int32), xp.asarray([v[0] for v in values], dtype=xp.int64), size
    )
    assert to_numpy(one).tolist() == [w[0] for w in want]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_domain_runs_give_every_levels_sums_and_parents(backend: str, seed: int) -> None:
    """Nodes labelled with random paths of 3 levels: per level, each run is one domain, its sums are the
    domain's grouped sums, and its parent run is the domain one level up that encloses it."""
    rng = random.Random(seed)
    xp = get_namespace(backend)
    n = rng.randint(1, 50)
    paths = [(rng.randint(0, 2), rng.randint(0, 3), rng.randint(0, 2)) for _ in range(n)]
    inside = [i for i in range(n) if rng.random() < 0.85]  # the other rows are outside the topology
    books: list[dict[tuple[int, ...], int]] = [{}, {}, {}]
    codes = [[books[k].setdefault(paths[i][: k + 1], len(books[k])) for k in range(3)] for i in inside]
    values = [[rng.randint(0, 9), rng.randint(0, 9)] for _ in range(n)]
    if not inside:
        return
    runs = domain_runs(xp, xp.asarray(inside, dtype=xp.int64), xp.asarray(codes, dtype=xp.int32))
    sums = split_levels(runs, run_sums(xp, runs, xp.asarray(values, dtype=xp.int64)))
    for k in range(3):
        run_codes = to_numpy(runs.codes[k]).tolist()
        assert sorted(run_codes) == sorted(set(books[k].values()))  # one run per domain
        name = {c: p for p, c in books[k].items()}
        for r, c in enumerate(run_codes):
            members = [i for i in inside if paths[i][: k + 1] == name[c]]
            assert to_numpy(sums[k][r, :]).tolist() == [sum(values[i][j] for i in members) for j in range(2)]
        if k:
            up = {c: p for p, c in books[k - 1].items()}
            parents = to_numpy(runs.parent[k]).tolist()
            up_codes = to_numpy(runs.codes[k - 1]).tolist()
            assert all(up[up_codes[parents[r]]] == name[c][:k] for r, c in enumerate(run_codes))
    top = ancestors(xp, runs, 2, xp.asarray([0], dtype=xp.int64), 0)
    assert len(top) == 3 and int(top[2][0]) == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_order_by_sorts_on_several_keys(backend: str) -> None:
    xp = get_namespace(backend)
    rng = random.Random(3)
    rows = [(rng.randint(0, 2), rng.random(), rng.randint(0, 5)) for _ in range(40)]
    keys = [xp.asarray([r[k] for r in rows]) for k in range(3)]
    order = to_numpy(order_by(xp, keys)).tolist()
    assert order == sorted(range(len(rows)), key=lambda i: rows[i])


@pytest.mark.parametrize("backend", BACKENDS)
def test_dominant_ratio_is_kais_job_to_free_ratio(backend: str) -> None:
    xp = get_namespace(backend)
    free = xp.asarray([[4000, 8000, 0], [1000, 1000, 0], [0, 8000, 0]], dtype=xp.int64)
    r = to_numpy(dominant_ratio(xp, (2000, 2000, 0), free)).tolist()
    assert r == [0.5, 2.0, 1000.0]  # memory is not asked for; no GPU free: KAI's 1000
    assert to_numpy(dominant_ratio(xp, (0, 0, 0), free)).tolist() == [0.0, 0.0, 0.0]


def state_with(backend: str) -> ClusterState:
    s = ClusterState(get_namespace(backend), max_gpus=4, capacity=2)
    for i, (gpus, mem) in enumerate([(4, 40960), (2, 81920), (4, 40960), (0, 0)]):
        s.add_node(
            NodeInfo(f"n{i}", cpu_milli=16000, memory_mib=65536, gpu_count=gpus, gpu_model="A100" if gpus else "",
                     gpu_memory_mib=mem, labels={"zone": "a" if i < 2 else "b", "rack": f"r{i % 2}"})
        )  # fmt: skip
    return s


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "demand",
    [PodDemand(num_gpus=1, gpu_milli=1000, cpu_milli=3000), PodDemand(num_gpus=2, gpu_milli=1000),
     PodDemand(num_gpus=1, gpu_milli=300), PodDemand(num_gpus=1, gpu_mib=20480), PodDemand(cpu_milli=5000)],
)  # fmt: skip
def test_pods_per_node_counts_what_fits(backend: str, demand: PodDemand) -> None:
    s = state_with(backend)
    xp = s.xp
    s.free_milli[0, 1] = 500  # half of a GPU taken on n0
    s.free_mib[0, 1] = 20480
    mask, fit = feasible(s, demand)
    zero = xp.zeros(fit.shape, dtype=xp.int64)
    milli, mib = gpu_need(s, demand) if demand.uses_gpu else (zero, zero)
    need = (milli, mib, demand.num_gpus, demand.cpu_milli, demand.memory_mib)
    free_mib = xp.minimum(s.free_mib, s.report_free_mib)
    got = to_numpy(pods_per_node(xp, mask, fit, s.free_milli, free_mib, s.free_cpu, s.free_mem, need, 9))
    if demand.whole:  # the fast path for whole GPUs answers alike
        fast = (None, None, demand.num_gpus, demand.cpu_milli, demand.memory_mib)
        same = pods_per_node(xp, mask, fit, s.free_milli, free_mib, s.free_cpu, s.free_mem, fast, 9)
        assert to_numpy(same).tolist() == got.tolist()
    # Brute force: place one pod after another on a copy of each node until it no longer fits.
    fm, fmib = to_numpy(s.free_milli).copy(), to_numpy(s.free_mib).copy()
    cpu, nm, nmib = to_numpy(s.free_cpu).copy(), to_numpy(milli), to_numpy(mib)
    want = []
    for r in range(s.num_rows):
        n = 0
        while n < 9 and bool(np.asarray(to_numpy(mask))[r]):
            if demand.cpu_milli and cpu[r] < demand.cpu_milli:
                break
            slots = [g for g in range(s.max_gpus) if to_numpy(s.present)[r, g] and fm[r, g] >= nm[r, g]
                     and fmib[r, g] >= nmib[r, g]][: demand.num_gpus]  # fmt: skip
            if len(slots) < demand.num_gpus:
                break
            for g in slots:
                fm[r, g] -= nm[r, g]
                fmib[r, g] -= nmib[r, g]
            cpu[r] -= demand.cpu_milli
            n += 1
        want.append(n)
    assert got[: s.num_rows].tolist() == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_domain_columns_follow_nodes_and_topologies(backend: str) -> None:
    s = state_with(backend)
    assert s.domain.shape == (s.capacity, 0)
    s.set_topologies({"dc": ("zone", "rack")})
    col_zone, col_rack = s.domains.column[("dc", 0)], s.domains.column[("dc", 1)]
    names = [[s.domains.name(c, int(s.domain[r, c])) for c in (col_zone, col_rack)] for r in range(4)]
    assert names == [
        ["a", "a/r0"],
        ["a", "a/r1"],
        ["b", "b/r0"],
        ["b", "b/r1"],
    ]  # a path: r0 of a is not r0 of b
    v = s.version
    s.add_node(NodeInfo("n4", 16000, 65536, labels={"zone": "a"}))  # no rack label: outside the topology
    row = s.row_of("n4")
    assert row is not None and [int(s.domain[row, c]) for c in (col_zone, col_rack)] == [-1, -1]
    s.update_node(NodeInfo("n4", 16000, 65536, labels={"zone": "b", "rack": "r0"}))
    assert int(s.domain[row, col_rack]) == int(s.domain[2, col_rack])  # the same rack as n2
    s.remove_node("n4")
    assert int(s.domain[row, col_rack]) == -1 and s.version > v
    for i in range(5, 40):  # rows grow: the new rows start outside every topology
        s.add_node(NodeInfo(f"n{i}", 1000, 1024))
    assert int(s.domain[s.capacity - 1, col_zone]) == -1
    view = s.take_rows([2, 1])
    assert to_numpy(view.domain).tolist() == [
        to_numpy(s.domain[2, :]).tolist(),
        to_numpy(s.domain[1, :]).tolist(),
    ]
    s.set_topologies({})
    assert s.domain.shape == (s.capacity, 0) and s.domains.width == 0
