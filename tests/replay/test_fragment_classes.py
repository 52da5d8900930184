"""The table-driven one-device kernels (`fragment_classes.py`) give `fragment.py`'s scores bit for bit."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from scheduler.placement.fgd import FgdPolicy
from scheduler.placement.fragment_policy import FragmentPolicy, NodeView
from scheduler.placement.wastefit import WasteFitPolicy
from scheduler.placement.workload import TaskType, TypicalWorkload, WorkloadArrays
from scheduler.state.backend import namespace
from scheduler.state.codebook import Codebook
from scheduler.state.demand import PodDemand

XP = ["numpy", "strict"]
SIZES = (0, 100, 320, 470, 500, 650, 810, 1000)


def _workload(rng: random.Random, multi: bool) -> TypicalWorkload:
    types = {
        TaskType(rng.choice((1000, 2000, 4000, 8000)), mu, 1 if mu else 0, rng.choice(((), ("T4",), ("G2",))))
        for mu in rng.sample(SIZES, 6)
    }
    if multi:
        types |= {TaskType(8000, 1000, 2), TaskType(4000, 500, 4)}
    ranked = sorted(types)
    # the multi-device types the most popular: wastefit keeps the top 95% of types for the fragment
    weights = [2.0 if t.num_gpus > 1 else rng.random() + 0.01 for t in ranked]
    return TypicalWorkload(tuple(ranked), tuple(w / sum(weights) for w in weights), 30000.0)


def _view(xp: Any, wa: WorkloadArrays, rng: random.Random, rows: int, need: int) -> NodeView:
    free = [
        [rng.choice((0, 0, 90, 180, 320, 500, 530, 680, 1000, 1000)) for _ in range(8)] for _ in range(rows)
    ]
    model = xp.asarray([rng.choice((0, 1, 2)) for _ in range(rows)], dtype=xp.int64)
    cpu = [rng.choice((0, 1500, 4000, 9000, 64000)) for _ in range(rows)]
    mem = [rng.choice((0, 20000, 200000)) for _ in range(rows)]
    return NodeView(
        free=xp.asarray(free, dtype=xp.int64),
        cpu=xp.asarray(cpu, dtype=xp.int64),
        access=xp.take(wa.access, model, axis=0),
        need=xp.full((rows,), need, dtype=xp.int64),
        mem=xp.asarray(mem, dtype=xp.int64),
        model=model,
    )


def _values(a: Any) -> list[float]:
    return [float(a[i]) for i in range(int(a.shape[0]))]


def _reference(
    policy: FragmentPolicy, xp: Any, wa: WorkloadArrays, v: NodeView, d: PodDemand
) -> tuple[Any, Any]:
    """The same policy's `_kernel` with the tables taken away (the `fragment.py` path)."""
    plain = WorkloadArrays(wa.milli, wa.count, wa.cpu, wa.weight, wa.access, wa.models_seen)
    return policy._kernel(xp, plain, v, d)


@pytest.mark.parametrize("backend", XP)
@pytest.mark.parametrize("policy_cls", [WasteFitPolicy, FgdPolicy])
@pytest.mark.parametrize("multi", [False, True])  # a workload with types on several devices, or none
def test_one_device_kernels_match_fragment_bit_for_bit(
    backend: str, policy_cls: type[FragmentPolicy], multi: bool
) -> None:
    xp = namespace(backend)
    book = Codebook()
    for m in ("T4", "G2"):
        book.code(m)
    demands = [
        PodDemand(cpu_milli=2000, memory_mib=8000, num_gpus=1, gpu_milli=320),  # fraction
        PodDemand(cpu_milli=4000, memory_mib=16000, num_gpus=1, gpu_milli=500),
        PodDemand(cpu_milli=8000, memory_mib=32000, num_gpus=1, gpu_milli=1000),  # one whole GPU
        PodDemand(cpu_milli=3000, memory_mib=12000),  # CPU only
    ]
    compared = 0
    for seed in range(12):
        rng = random.Random(seed)
        wl = _workload(rng, multi)
        policy = policy_cls()
        policy.set_typical_workload(wl)
        assert policy.workload is not None
        wa = WorkloadArrays.build(xp, policy.workload, book)
        assert wa.tables is not None
        assert (wa.tables.devices is not None) == multi  # the device counts are kept only where needed
        for d in demands:
            v = _view(xp, wa, rng, 7, d.gpu_milli if d.uses_gpu else 0)
            got, ref = policy._kernel(xp, wa, v, d), _reference(policy, xp, wa, v, d)
            assert _values(got[0]) == _values(ref[0])  # exactly; -inf where it does not fit
            if d.uses_gpu and not d.whole:
                assert _values(got[1]) == _values(ref[1])  # the GPU each score comes from
                plain = WorkloadArrays(wa.milli, wa.count, wa.cpu, wa.weight, wa.access, wa.models_seen)
                fast, slow = (
                    policy._fraction_fragments(xp, wa, v, d),
                    policy._fraction_fragments(xp, plain, v, d),
                )
                assert _values(fast[0]) == _values(slow[0])  # what `pick_gpus` re-derives for one node
                assert [_values(fast[1][r, :]) for r in range(7)] == [
                    _values(slow[1][r, :]) for r in range(7)
                ]
            compared += sum(math.isfinite(x) for x in _values(ref[0]))
    assert compared > 100  # most rows fit: the comparison is about real scores


@pytest.mark.parametrize("backend", XP)
def test_kernel_on_rows_with_room_gives_the_same_scores_and_gpus(backend: str) -> None:
    """A rarely asked shape re-scores dozens of rows, most of them full: the kernel then runs on the rows
    with room only (`_kernel_with_room`); every row's score and a fraction's GPU are the kernel's own."""
    xp = namespace(backend)
    book = Codebook()
    for m in ("T4", "G2"):
        book.code(m)
    demands = [
        PodDemand(cpu_milli=2000, memory_mib=8000, num_gpus=1, gpu_milli=650),
        PodDemand(cpu_milli=8000, memory_mib=32000, num_gpus=1, gpu_milli=1000),
        PodDemand(cpu_milli=8000, memory_mib=32000, num_gpus=2, gpu_milli=1000),
        PodDemand(cpu_milli=3000, memory_mib=12000),
    ]
    skipped = 0
    for seed in range(6):
        rng = random.Random(100 + seed)
        policy = WasteFitPolicy()
        policy.set_typical_workload(_workload(rng, multi=seed % 2 == 1))
        assert policy.workload is not None
        wa = WorkloadArrays.build(xp, policy.workload, book)
        for d in demands:
            for rows in (5, 40):  # below the threshold: the kernel itself; above: rows with room first
                v = _view(xp, wa, rng, rows, d.gpu_milli if d.uses_gpu else 0)
                got, ref = policy._kernel_with_room(xp, wa, v, d), policy._kernel(xp, wa, v, d)
                assert _values(got[0]) == _values(ref[0])
                if d.uses_gpu and not d.whole:
                    assert got[1] is not None and ref[1] is not None
                    finite = [r for r, x in enumerate(_values(ref[0])) if math.isfinite(x)]
                    assert [int(got[1][r]) for r in finite] == [int(ref[1][r]) for r in finite]
                skipped += sum(not math.isfinite(x) for x in _values(ref[0])) if rows == 40 else 0
    assert skipped > 50  # rows without room were there to be left out
