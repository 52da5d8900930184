"""An explicit offline placement guided by the bound's LP: how close the bound is to what can be done.

The LP of `bound.py` says how many pods of each class go to each node type. This module turns that into
real placements, pod by pod, on the real cluster state (the same filters as every policy: CPU, memory,
model, GPUs with room), so every pod it reports placed is a placement the scheduler would accept:

1. For each node type, the LP's pods (rounded down per class) are placed on that type's nodes, largest
   GPU request first (multi-GPU, whole GPUs, then fractions by decreasing size: first-fit decreasing,
   which pairs an 810 with the small sizes its 190 milli can hold), each on the node left fullest
   (`bestfit`) and, for a fraction, the GPU with the least room.
2. Pods left over (rounding, or a type whose pooled CPU or memory the LP could split but nodes cannot)
   are tried on every node in the same order; CPU-only pods last.

The placed GPU milli can never exceed the certified bound (that would prove the bound wrong: the tests
and `tessera replay --bound` check it); how close it comes shows how tight the bound is.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.model.types import Placement
from scheduler.placement.filters import feasible
from scheduler.placement.placer import best_row
from scheduler.placement.policy import Array, rank_gpus
from scheduler.replay.bound import Relaxation, solve_bound
from scheduler.replay.protocol import build_state
from scheduler.replay.trace import TraceNode, TracePod
from scheduler.state.backend import ArrayNamespace
from scheduler.state.cluster_state import ClusterState

_BIG = 1 << 40


@dataclass(frozen=True)
class OfflineResult:
    placed: int
    failed: int
    placed_milli: int
    capacity_milli: int

    @property
    def unallocated_pct(self) -> float:
        return 100.0 * (1.0 - self.placed_milli / self.capacity_milli)


def _order(p: TracePod) -> tuple[int, int, int]:
    return (-p.gpu_request_milli, -p.cpu_milli, -p.memory_mib)


def _choose(xp: ArrayNamespace, state: ClusterState, pod: TracePod, rows: Array | None) -> Placement | None:
    """The node and GPUs for `pod` among `rows` (all when None), or None when nothing fits.

    A fraction goes where it leaves the smallest gap on its GPU (first-fit decreasing pairs sizes);
    among equal gaps, and for whole GPUs, the node keeps the most CPU and memory headroom (CPU and memory
    are pooled per node type in the LP; spreading keeps each node near the pooled ratio)."""
    d = pod.demand()
    mask, fit = feasible(state, d)
    if rows is not None:
        mask = mask & rows
    if not bool(xp.any(mask)):
        return None
    cpu_left = xp.astype(state.free_cpu - d.cpu_milli, xp.float64) / xp.astype(
        xp.maximum(state.total_cpu, xp.ones_like(state.total_cpu)), xp.float64
    )
    mem_left = xp.astype(state.free_mem - d.memory_mib, xp.float64) / xp.astype(
        xp.maximum(state.total_mem, xp.ones_like(state.total_mem)), xp.float64
    )
    score = xp.minimum(cpu_left, mem_left)
    gap = xp.where(fit, xp.astype(state.free_milli, xp.int64) - d.gpu_milli, xp.full(fit.shape, _BIG))
    if d.uses_gpu and not d.whole:
        score = score - 10.0 * xp.astype(xp.min(gap, axis=1), xp.float64)
    row = best_row(xp, score, mask, tie_break="first")
    if row is None:
        return None
    slots = rank_gpus(xp, gap[row, :], fit[row, :], d.num_gpus, ascending=True) if d.uses_gpu else []
    shares = tuple(state.share_for(row, s, d.gpu_milli, d.gpu_mib) for s in slots)
    placement = Placement(node=row, gpus=shares, cpu_milli=d.cpu_milli, memory_mib=d.memory_mib)
    state.place(placement)
    state.commit()
    return placement


def lp_guided_placement(
    xp: ArrayNamespace, nodes: Sequence[TraceNode], pods: Sequence[TracePod], capacity: int
) -> tuple[OfflineResult, float]:
    """(the explicit placement of `pods`, the certified bound's placeable milli for the same pods)."""
    bound, relax = solve_bound(nodes, pods, capacity)
    state = build_state(xp, nodes)
    type_rows = _type_masks(xp, state, nodes, relax)
    by_class: dict[int, list[TracePod]] = defaultdict(list)
    for p in sorted(pods, key=lambda p: p.name):
        by_class[relax.pod_class[p.name]].append(p)
    planned: dict[int, list[TracePod]] = defaultdict(list)
    for (ci, ti), count in sorted(relax.assignment.items()):
        take = min(math.floor(count + 1e-6), len(by_class[ci]))
        planned[ti].extend(by_class[ci][:take])
        del by_class[ci][:take]
    leftover = [p for group in by_class.values() for p in group]
    placed_milli = placed = 0
    for ti in sorted(planned):
        for pod in sorted(planned[ti], key=_order):
            if _choose(xp, state, pod, type_rows[ti]) is None:
                leftover.append(pod)
            else:
                placed += 1
                placed_milli += pod.gpu_request_milli
    failed = 0
    for pod in sorted(leftover, key=lambda p: (p.num_gpu == 0, *_order(p))):
        if _choose(xp, state, pod, None) is None:
            failed += 1
        else:
            placed += 1
            placed_milli += pod.gpu_request_milli
    return OfflineResult(placed, failed, placed_milli, capacity), bound.certified_milli


def _type_masks(
    xp: ArrayNamespace, state: ClusterState, nodes: Sequence[TraceNode], relax: Relaxation
) -> dict[int, Array]:
    index = {t: i for i, t in enumerate(relax.node_types)}
    kinds = [index[(n.model if n.gpu else "", n.gpu, n.cpu_milli, n.memory_mib)] for n in nodes]
    rows = [state.row_of(n.sn) for n in nodes]
    out: dict[int, Array] = {}
    for ti in range(len(relax.node_types)):
        flags = [False] * state.capacity
        for row, kind in zip(rows, kinds, strict=True):
            if row is not None and kind == ti:
                flags[row] = True
        out[ti] = xp.asarray(flags, dtype=xp.bool)
    return out
