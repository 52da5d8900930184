"""The fragment function on hand-built nodes, one test per case of the trace README."""

from __future__ import annotations

import pytest

from scheduler.placement.fragment import fragment, fragment_after_fraction
from scheduler.placement.workload import TaskType, TypicalWorkload, WorkloadArrays
from scheduler.state.backend import namespace
from scheduler.state.codebook import Codebook

XP = ["numpy", "strict"]


def frag_of(backend: str, task: TaskType, free: list[int], cpu: int, model: str = "T4") -> float:
    xp = namespace(backend)
    book = Codebook()
    for m in ("T4", "G2"):
        book.code(m)
    wa = WorkloadArrays.build(xp, TypicalWorkload((task,), (1.0,)), book)
    access = xp.take(wa.access, xp.asarray([book.code(model) + 1], dtype=xp.int64), axis=0)
    out = fragment(xp, wa, xp.asarray([free], dtype=xp.int64), xp.asarray([cpu], dtype=xp.int64), access)
    return float(out[0])


@pytest.mark.parametrize("backend", XP)
def test_no_gpu_demand_counts_all_free_milli(backend: str) -> None:
    assert frag_of(backend, TaskType(1000, 0, 0), [1000, 300], 64000) == 1300


@pytest.mark.parametrize("backend", XP)
def test_wrong_model_counts_all_free_milli(backend: str) -> None:
    assert frag_of(backend, TaskType(1000, 500, 1, ("G2",)), [1000, 300], 64000, model="T4") == 1300
    assert frag_of(backend, TaskType(1000, 500, 1, ("G2",)), [1000, 300], 64000, model="G2") == 300


@pytest.mark.parametrize("backend", XP)
def test_too_little_cpu_counts_all_free_milli(backend: str) -> None:
    assert frag_of(backend, TaskType(8000, 500, 1), [1000, 300], 4000) == 1300


@pytest.mark.parametrize("backend", XP)
def test_not_enough_gpus_with_room_counts_all_free_milli(backend: str) -> None:
    assert frag_of(backend, TaskType(1000, 1000, 2), [1000, 900, 0], 64000) == 1900
    assert frag_of(backend, TaskType(1000, 600, 1), [500, 500], 64000) == 1000


@pytest.mark.parametrize("backend", XP)
def test_fitting_type_counts_gpus_too_small(backend: str) -> None:
    # 250 and 100 are too small for 300; 1000 and 300 are not
    assert frag_of(backend, TaskType(1000, 300, 1), [1000, 250, 300, 100], 64000) == 350
    assert frag_of(backend, TaskType(1000, 1000, 2), [1000, 1000, 999], 64000) == 999
    assert frag_of(backend, TaskType(1000, 300, 1), [1000, 1000], 64000) == 0


@pytest.mark.parametrize("backend", XP)
def test_popularity_weights_and_incremental_fraction_match_direct(backend: str) -> None:
    xp = namespace(backend)
    book = Codebook()
    book.code("T4")
    wl = TypicalWorkload(
        (TaskType(1000, 500, 1), TaskType(1000, 1000, 1), TaskType(1000, 0, 0)), (0.5, 0.3, 0.2)
    )
    wa = WorkloadArrays.build(xp, wl, book)
    free = xp.asarray([[1000, 300], [600, 1000], [1000, 1000]], dtype=xp.int64)
    cpu = xp.asarray([8000, 8000, 500], dtype=xp.int64)
    access = xp.take(wa.access, xp.asarray([1, 1, 1], dtype=xp.int64), axis=0)
    before = fragment(xp, wa, free, cpu, access)
    assert [float(v) for v in before] == [500.0, 500.0, 2000.0]  # 0.5*300 + 0.3*300 + 0.2*1300, ...
    b2, after = fragment_after_fraction(
        xp, wa, free, cpu, access, xp.asarray([500, 500, 500], dtype=xp.int64), 1000
    )
    assert [float(v) for v in b2] == [float(v) for v in before]
    # the incremental per-GPU result equals recomputing F on the modified node
    for row, g in ((0, 0), (1, 0), (1, 1), (2, 1)):
        f = [[int(free[row, j]) - (500 if j == g else 0) for j in range(2)]]
        direct = fragment(
            xp,
            wa,
            xp.asarray(f, dtype=xp.int64),
            xp.asarray([int(cpu[row]) - 1000]),
            access[row : row + 1, :],
        )
        assert float(after[row, g]) == pytest.approx(float(direct[0]))


@pytest.mark.parametrize("backend", XP)
def test_fragfit_cpu_and_memory_shortfall(backend: str) -> None:
    """Free GPU milli that the node's free CPU (memory) cannot serve at the workload's ratio."""
    from scheduler.placement.fragfit import FragFitPolicy, cpu_per_gpu
    from scheduler.state.demand import PodDemand

    xp = namespace(backend)
    demands = [
        PodDemand(cpu_milli=8000, memory_mib=32768, num_gpus=1, gpu_milli=1000),
        PodDemand(cpu_milli=2000, memory_mib=8192, num_gpus=1, gpu_milli=500),
        PodDemand(cpu_milli=4000, memory_mib=1024),  # CPU-only: not part of the per-GPU ratios
    ]
    wl = TypicalWorkload.from_demands(demands, coverage=1.0)
    assert wl.memory_per_gpu == pytest.approx((32768 + 8192) / 1.5)
    assert cpu_per_gpu(wl) == pytest.approx((8000 + 2000) / 1.5)  # equal popularity
    policy = FragFitPolicy()
    policy.set_typical_workload(wl)
    ratio = (8000 + 2000) / 1.5
    free = xp.asarray([3000.0, 3000.0, 0.0], dtype=xp.float64)
    cpu = xp.asarray([int(3 * ratio), int(ratio), 50_000], dtype=xp.int64)
    short = policy.cpu_shortfall(xp, free, cpu)
    assert [round(float(v)) for v in short] == [0, 2000, 0]
    mem = xp.asarray([0, 10**9, 0], dtype=xp.int64)
    assert [round(float(v)) for v in policy.memory_shortfall(xp, free, mem)] == [3000, 0, 0]
