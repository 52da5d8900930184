"""Turn a policy's scores into a concrete placement of one pod (node + GPU shares)."""

from __future__ import annotations

import random
from typing import Literal

from scheduler.model.types import Placement
from scheduler.placement.filters import feasible
from scheduler.placement.policy import Array, PlacementPolicy
from scheduler.state.backend import ArrayNamespace
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

TieBreak = Literal["first", "random"]


def best_row(
    xp: ArrayNamespace,
    scores: Array,
    mask: Array,
    *,
    tie_break: TieBreak = "first",
    rng: random.Random | None = None,
) -> int | None:
    """Row with the highest score among `mask`; ties to the lowest row, or uniformly at random."""
    if scores.dtype != xp.float64:
        scores = xp.astype(scores, xp.float64)
    # Two passes over the rows for the usual answer (a non-row-local policy pays this on every decision).
    masked = xp.where(mask, scores, xp.full((), -float("inf"), dtype=xp.float64))
    if tie_break == "first":
        row = int(xp.argmax(masked))
        return row if bool(masked[row] > -float("inf")) else None
    top = xp.max(masked)
    if not bool(top > -float("inf")):
        return None
    ties = xp.nonzero(masked == top)[0]
    pick = (rng or random).randrange(int(ties.shape[0]))
    return int(ties[pick])


def placement_at(state: ClusterState, row: int, slots: list[int], d: PodDemand) -> Placement:
    """The placement of `d` on node `row`, GPU `slots` (each share converted with that GPU's memory)."""
    shares = tuple(state.share_for(row, s, d.gpu_milli, d.gpu_mib) for s in slots)
    return Placement(
        node=row, gpus=shares, cpu_milli=d.cpu_milli, memory_mib=d.memory_mib, scalars=d.scalars,
        ports=d.host_ports,
    )  # fmt: skip


def place_one(
    state: ClusterState,
    policy: PlacementPolicy,
    d: PodDemand,
    *,
    exclude: Array | None = None,
    tie_break: TieBreak = "first",
    rng: random.Random | None = None,
) -> Placement | None:
    """Choose where `d` goes (without applying it). None when no node fits. `exclude`: bool[C] rows
    not to use now (nodes the session masked), treated as infeasible."""
    mask, fit = feasible(state, d)
    if exclude is not None:
        mask = mask & ~exclude
    scores = policy.score_nodes(state, d, mask, fit)
    row = best_row(state.xp, scores, mask, tie_break=tie_break, rng=rng)
    if row is None:
        return None
    slots = policy.pick_gpus(state, row, d, fit) if d.uses_gpu else []
    return placement_at(state, row, slots, d)
