"""Consolidation during a replay (`tessera replay --consolidate`): pods may move, every move counted.

The rules are those of the scheduler's `consolidate` action (`scheduler/actions/consolidate.py`, KAI's):
- it runs for a pod that fits nowhere, and only when that is fragmentation: the nodes that could host it
  (model, selector) have enough free GPU in total, in pieces too small;
- it makes room on one node at a time by moving the fewest placed pods (every replay pod is a
  preemptible job of one pod, so each can move alone), and only pods holding GPUs;
- each moved pod must get a new place, chosen by the replay's policy, never the place it has now; else
  the plan is dropped and the next one tried (a trial, rolled back);
- the search is bounded by work (sets tried per waiting pod, pods moved per plan), so a replay decides
  the same on any machine.

What the action's code does around that (a Session, queues, a Transaction of Kubernetes evictions and
reservations, moved pods recreated next cycle) has no meaning in the protocol, where a pod's arrival is
one instant: here a plan is applied to the replay's `ClusterState` at once.

Which pods: the waiting pod is given one GPU (a fraction), or the GPUs it needs on one node (whole GPUs),
freed by the moves. Candidate GPUs are ranked by how few pods must leave, then by how little GPU they hold
(small pods find a gap elsewhere more easily), so the first plan that succeeds is one of the cheapest.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from scheduler.model.types import Placement
from scheduler.placement.filters import feasible, node_checks
from scheduler.placement.placer import place_one, placement_at
from scheduler.placement.policy import Array, PlacementPolicy
from scheduler.state.cluster_state import ClusterState, OvercommitError
from scheduler.state.demand import PodDemand

MAX_MOVES = 8  # pods moved for one waiting pod, as the action
MAX_PLANS = 16  # plans tried (each a trial) per waiting pod


@dataclass
class Plan:
    cost: tuple[int, int]  # pods moved, GPU milli moved
    row: int
    slots: list[int]  # GPUs the waiting pod takes
    movers: list[int]  # pod ids to move


@dataclass
class Consolidator:
    """Tracks where every placed pod is, and moves some of them to make room for a pod that fits nowhere."""

    state: ClusterState
    policy: PlacementPolicy
    rng: random.Random
    max_moves: int = MAX_MOVES
    max_plans: int = MAX_PLANS
    moves: int = 0  # pods moved, in all
    consolidations: int = 0  # waiting pods placed thanks to moves
    tried: int = 0  # waiting pods consolidation searched for
    trials: int = 0  # plans tried
    _held: dict[int, tuple[PodDemand, Placement]] = field(default_factory=dict)
    _on_gpu: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    _by_milli: dict[int, set[int]] = field(default_factory=dict)  # one-GPU pods by the milli they hold

    def placed(self, pid: int, d: PodDemand, pl: Placement) -> None:
        """The replay placed pod `pid` at `pl` (already applied to the state)."""
        self._held[pid] = (d, pl)
        for g in pl.gpus:
            self._on_gpu.setdefault((pl.node, g.slot), set()).add(pid)
        if len(pl.gpus) == 1:  # a pod on several GPUs is not moved (a GPU it shares is not freed)
            self._by_milli.setdefault(pl.gpus[0].milli, set()).add(pid)

    def _forget(self, pid: int) -> None:
        _, pl = self._held.pop(pid)
        for g in pl.gpus:
            self._on_gpu[(pl.node, g.slot)].discard(pid)
        if len(pl.gpus) == 1:
            self._by_milli[pl.gpus[0].milli].discard(pid)

    def make_room(self, pid: int, d: PodDemand) -> Placement | None:
        """Place `d` (pod `pid`, which fits nowhere now) by moving other pods; the placement applied
        (the moves too, the state committed) or None with nothing changed."""
        if not d.uses_gpu or d.num_gpus * d.gpu_milli <= 0:
            return None
        static = self._static_rows(d)
        if not self._fragmented(d, static):
            return None  # short of capacity: moving pods would not help
        self.tried += 1
        movable = self._movable()
        if not movable:
            return None
        for plan in self._plans(d, static, movable)[: self.max_plans]:
            self.trials += 1
            pl = self._try(pid, d, plan)
            if pl is not None:
                self.consolidations += 1
                self.moves += len(plan.movers)
                return pl
        return None

    # ------------------------------------------------------------------------------------- search
    def _static_rows(self, d: PodDemand) -> Array:
        """bool[C]: nodes that could host `d` were they empty (model, selector, enough GPUs)."""
        s, xp = self.state, self.state.xp
        c = node_checks(s, d)
        gpus = xp.sum(xp.astype(s.present & s.healthy, xp.int32), axis=1)
        return c.placeable() & (gpus >= d.num_gpus)

    def _fragmented(self, d: PodDemand, static: Array) -> bool:
        s, xp = self.state, self.state.xp
        usable = s.present & s.healthy & static[:, None]
        free = xp.sum(xp.where(usable, xp.astype(s.free_milli, xp.int64), xp.zeros_like(s.free_milli)))
        return int(free) >= d.num_gpus * d.gpu_milli

    def _movable(self) -> set[int]:
        """Pods that some node has room for now (arithmetic: no trial). Only pods no larger than the
        largest free piece of any GPU are checked, which after the first failures are few."""
        s, xp = self.state, self.state.xp
        largest = int(xp.max(xp.where(s.present & s.healthy, s.free_milli, xp.zeros_like(s.free_milli))))
        fits: dict[PodDemand, bool] = {}
        out: set[int] = set()
        for milli, pods in self._by_milli.items():
            if milli > largest:
                continue
            for p in pods:
                dp = self._held[p][0]
                if dp not in fits:
                    fits[dp] = bool(xp.any(feasible(s, dp)[0]))
                if fits[dp]:
                    out.add(p)
        return out

    def _plans(self, d: PodDemand, static: Array, movable: set[int]) -> list[Plan]:
        """Candidate plans, cheapest first: per node holding movable pods, the GPUs to free and the
        fewest movable pods to move from each."""
        s = self.state
        rows = sorted({self._held[p][1].node for p in movable})
        plans: list[Plan] = []
        for r in rows:
            if not bool(static[r]):
                continue
            # Per GPU: the fewest movable pods whose going leaves room for one share of the pod.
            per_gpu: list[tuple[int, int, int, list[int]]] = []  # (moves, milli moved, slot, pods)
            for slot, f in enumerate(s.node_gpu_row(r)):
                need = d.gpu_milli - f
                if need <= 0:
                    per_gpu.append((0, 0, slot, []))
                    continue
                here = [p for p in self._on_gpu.get((r, slot), ()) if p in movable]
                here.sort(key=lambda p: (-self._milli(p, r, slot), p))
                taken, got = self._fewest(here, r, slot, need)
                if taken is not None and len(taken) <= self.max_moves:
                    per_gpu.append((len(taken), got, slot, taken))
            if len(per_gpu) < d.num_gpus:
                continue
            per_gpu.sort()
            chosen = per_gpu[: d.num_gpus]
            movers = [p for c in chosen for p in c[3]]
            if not movers or len(movers) > self.max_moves:
                continue  # nothing to move: it would have fitted (CPU or memory blocks it)
            cost = (len(movers), sum(c[1] for c in chosen))
            plans.append(Plan(cost, r, sorted(c[2] for c in chosen), movers))
        plans.sort(key=lambda p: (p.cost, p.row))
        return plans

    def _milli(self, pid: int, row: int, slot: int) -> int:
        return next(g.milli for g in self._held[pid][1].gpus if g.slot == slot)

    def _fewest(self, pods: list[int], row: int, slot: int, need: int) -> tuple[list[int] | None, int]:
        """The fewest of `pods` (on GPU `slot` of `row`) holding >= `need` milli, the smallest such set
        among those of that size: the k-1 largest and the smallest one that completes them."""
        sizes = [self._milli(p, row, slot) for p in pods]  # largest first
        k, total = 0, 0
        while k < len(sizes) and total < need:
            total += sizes[k]
            k += 1
        if total < need:
            return None, 0
        head = sum(sizes[: k - 1])
        last = min(
            (i for i in range(k - 1, len(sizes)) if head + sizes[i] >= need), key=lambda i: (sizes[i], i)
        )
        taken = [*pods[: k - 1], pods[last]]
        return taken, head + sizes[last]

    # -------------------------------------------------------------------------------------- trial
    def _try(self, pid: int, d: PodDemand, plan: Plan) -> Placement | None:
        """Apply `plan` (take the movers off, place the pod on the freed GPUs, place every mover anew by
        the policy); keep it and commit when it all worked, else roll back."""
        s = self.state
        cp = s.checkpoint()
        old = {p: self._held[p] for p in plan.movers}
        try:
            for p in plan.movers:
                s.release(old[p][1])
            pl = placement_at(s, plan.row, plan.slots, d)
            s.place(pl)
            new: dict[int, Placement] = {}
            for p in sorted(plan.movers, key=lambda p: (-old[p][0].gpu_milli * old[p][0].num_gpus, p)):
                dp, was = old[p]
                to = place_one(s, self.policy, dp, tie_break="random", rng=self.rng)
                if to is None or to == was:
                    s.rollback(cp)
                    return None
                s.place(to)
                new[p] = to
        except OvercommitError:  # CPU or memory of the node: the plan cannot be
            s.rollback(cp)
            return None
        s.commit()
        for p in plan.movers:
            self._forget(p)
            self.placed(p, old[p][0], new[p])
        self.placed(pid, d, pl)
        return pl
