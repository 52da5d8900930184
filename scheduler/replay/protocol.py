"""The published evaluation protocol of the FGD paper (as its simulator runs it).

Per seed: sort pods by name, shuffle with the seed, then inflate by drawing pods uniformly with
replacement from the original list until the next draw would push the summed GPU request past `tune` x
cluster GPU capacity; a list that already asks more (`multigpu30..50`) is thinned instead, removing
pods at random until it fits, as the simulator's `tuneDownPods` does. Pods then arrive one by one, never
leave; one that fits nowhere is counted as failed and skipped. After every pod, arrived and allocated GPU milli are recorded (see `curve.py`).
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.placement.placer import place_one
from scheduler.placement.policy import PlacementPolicy
from scheduler.placement.registry import make_policy
from scheduler.placement.workload import DEFAULT_COVERAGE, TypicalWorkload
from scheduler.replay.consolidate import Consolidator
from scheduler.replay.curve import Curve, bin_curve
from scheduler.replay.trace import TraceNode, TracePod
from scheduler.state.backend import ArrayNamespace
from scheduler.state.cluster_state import ClusterState

DEFAULT_TUNE = 1.3


def build_state(xp: ArrayNamespace, nodes: Sequence[TraceNode]) -> ClusterState:
    max_gpus = max((n.gpu for n in nodes), default=1)
    state = ClusterState(xp, max_gpus=max(max_gpus, 1), capacity=max(len(nodes), 1))
    for n in sorted(nodes, key=lambda n: n.sn):  # rows in name order (the simulator's tie rule, `fgd-name`)
        state.add_node(n.node_info())
    state.commit()
    return state


def capacity_milli(nodes: Sequence[TraceNode]) -> int:
    return sum(n.gpu for n in nodes) * MILLI_PER_GPU


def arrival_order(pods: Sequence[TracePod], seed: int, tune: float, capacity: int) -> list[TracePod]:
    """Sorted by name, shuffled with `seed`, inflated with replacement up to `tune` x capacity (or
    thinned at random down to it)."""
    rng = random.Random(seed)
    base = sorted(pods, key=lambda p: p.name)
    order = list(base)
    rng.shuffle(order)
    total = sum(p.gpu_request_milli for p in order)
    target = tune * capacity
    if tune > 0 and total < target and any(p.gpu_request_milli > 0 for p in base):
        while True:
            pick = base[rng.randrange(len(base))]
            if total + pick.gpu_request_milli > target:
                break
            total += pick.gpu_request_milli
            order.append(pick)
    elif tune > 0 and total > target:
        while total > target and order:
            total -= order.pop(rng.randrange(len(order))).gpu_request_milli
    return order


@dataclass
class Moves:
    """What consolidation did up to the last record of bin 100 (the headline's)."""

    moved: int  # pods moved
    placed: int  # pods placed (moves do not count)
    consolidated: int  # pods placed thanks to moves
    searched: int  # pods that fitted nowhere, fragmented, for which moves were searched

    @property
    def per_placed(self) -> float:
        return self.moved / self.placed if self.placed else 0.0


@dataclass
class SeedResult:
    seed: int
    attempted: int
    failed: int
    elapsed_s: float
    curve: Curve
    moves: Moves | None = None  # with consolidation
    # One-GPU fractions placed by the last record of bin 100, per milli (the LP floor of `bound.py`).
    placed_fractions: dict[int, int] = field(default_factory=dict)

    @property
    def unallocated_at_100(self) -> float:
        return 100.0 - self.curve.allocated_at(100)


def typical_workload(pods: Sequence[TracePod], coverage: float = DEFAULT_COVERAGE) -> TypicalWorkload:
    """From the original (un-inflated) pod list, as the protocol gives every policy."""
    return TypicalWorkload.from_demands((p.demand() for p in pods), coverage)


def replay_seed(
    xp: ArrayNamespace,
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    policy_name: str,
    seed: int,
    *,
    tune: float = DEFAULT_TUNE,
    progress: Callable[[int, int], None] | None = None,
    until_pct: int | None = None,
    consolidate: bool = False,
) -> SeedResult:
    """One seed of the protocol with a fresh cluster and a fresh policy. With `until_pct`, the replay
    stops at the first pod whose record falls past that arrived % bin (bins up to it are exact; the
    curve beyond repeats the last value): the variant table needs bin 100 only. With `consolidate`, a
    pod that fits nowhere may be placed by moving placed pods (`consolidate.py`): not the published
    protocol, where pods never move."""
    capacity = capacity_milli(nodes)
    state = build_state(xp, nodes)
    policy: PlacementPolicy = make_policy(policy_name)
    caps = policy.capabilities
    if caps.seeded:
        policy.reseed(seed)
    if caps.typical_workload:
        policy.set_typical_workload(typical_workload(pods, caps.workload_coverage))
    order = arrival_order(pods, seed, tune, capacity)
    tie_rng = random.Random(seed * 7919 + 1)
    arrived: list[int] = []
    used: list[int] = []
    arrived_milli = used_milli = failed = 0
    mover = Consolidator(state, policy, tie_rng) if consolidate else None
    moves: Moves | None = None
    fractions: Counter[int] = Counter()
    at_100: dict[int, int] | None = None
    start = time.perf_counter()
    for i, pod in enumerate(order):
        d = pod.demand()
        arrived_milli += pod.gpu_request_milli
        pct = math.floor(100.0 * arrived_milli / capacity + 0.5)
        if until_pct is not None and pct > until_pct:
            order = order[:i]
            break
        if pct > 100 and at_100 is None:  # the records of bin 100 are all made
            at_100 = dict(fractions)
            if mover is not None:
                moves = Moves(mover.moves, i - failed, mover.consolidations, mover.tried)
        placement = place_one(state, policy, d, tie_break="random", rng=tie_rng)
        if placement is not None:
            state.place(placement)
            state.commit()
            if mover is not None:
                mover.placed(i, d, placement)
        elif mover is not None:
            placement = mover.make_room(i, d)
        if placement is None:
            failed += 1
        else:
            used_milli += pod.gpu_request_milli
            if d.num_gpus == 1 and d.gpu_milli < MILLI_PER_GPU:
                fractions[d.gpu_milli] += 1
        arrived.append(arrived_milli)
        used.append(used_milli)
        if progress is not None and (i % 256 == 255 or i == len(order) - 1):
            progress(i + 1, len(order))
    elapsed = time.perf_counter() - start
    if at_100 is None:  # the replay ended at or before bin 100
        at_100 = dict(fractions)
        if mover is not None:
            moves = Moves(mover.moves, len(order) - failed, mover.consolidations, mover.tried)
    curve = bin_curve(arrived, used, capacity)
    return SeedResult(seed, len(order), failed, elapsed, curve, moves, dict(sorted(at_100.items())))
