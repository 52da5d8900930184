"""Choosing whom to evict so that a waiting job fits (shared by `reclaim` and `preempt`).

Victims are whole jobs (a gang is evicted whole, never in part), preemptible only, and chosen to be the
fewest pods, then the lowest priority, then the youngest. The search is bounded in time:

- a single pod is fitted node by node: on each node that could host it, evict that node's candidates in
  order of preference until the pod fits there; the cheapest node wins;
- a gang is fitted greedily over the whole cluster in order of preference;
then victims that turn out unnecessary are dropped again (pruning). Every trial runs inside the caller's
transaction and is rolled back; only the chosen plan is left applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from scheduler.actions.views import label, place_members, running_now, static_rows
from scheduler.jobs import Job
from scheduler.memo import MemoKey
from scheduler.model import PodInfo
from scheduler.resources import Resources, placement_usage
from scheduler.session import Session
from scheduler.state.demand import demand_for
from scheduler.transaction import Transaction

MAX_VICTIM_JOBS = 32  # per waiting job: beyond this many, the plan is not worth the disruption
SEARCH_BUDGET_S = 0.05  # per waiting job


@dataclass(frozen=True)
class Victim:
    job: Job
    pods: tuple[PodInfo, ...]
    usage: Resources
    nodes: frozenset[int]

    def sort_key(self) -> tuple[int, float, int, str]:
        return (self.job.priority, -self.job.created_s, len(self.pods), self.job.key)


# The running preemptible jobs as the first action that asked found them (see `candidates`).
VICTIMS: MemoKey[list[Victim]] = MemoKey("victims")


def candidates(session: Session) -> list[Victim]:
    """Running preemptible jobs, most expendable first.

    Computed once per cycle; jobs evicted since then are left out. Pods placed later in the cycle are
    not candidates in it (evicting what was just bound would only churn)."""
    held = session.ledger.pods
    return [v for v in session.memo.get(VICTIMS, lambda: _running_preemptible(session))
            if all(p.uid in held for p in v.pods)]  # fmt: skip


def _running_preemptible(session: Session) -> list[Victim]:
    held = session.ledger.pods
    out = []
    for job in session.jobs:
        if not job.preemptible:
            continue
        pods = running_now(session, job)
        if not pods:
            continue
        usage = Resources()
        for p in pods:
            usage = usage + placement_usage(held[p.uid].placement)
        out.append(Victim(job, tuple(pods), usage, frozenset(held[p.uid].placement.node for p in pods)))
    out.sort(key=Victim.sort_key)
    return out


def evict(tx: Transaction, v: Victim, message: str, beneficiary: str) -> None:
    for p in v.pods:
        tx.evict(p, message, beneficiary)


@dataclass
class VictimSearch:
    session: Session
    tx: Transaction
    job: Job  # the waiting job
    pods: list[PodInfo]  # its pending members
    count: int  # how many of them must be placed
    allowed: Callable[[Victim], bool]  # judged on the queue figures as evictions accumulate
    message: str  # recorded on every eviction
    room: Callable[[], bool] = lambda: True  # queue rules that must hold before the job is placed
    budget_s: float = SEARCH_BUDGET_S

    def run(self, pool: list[Victim]) -> list[Victim] | None:
        """Apply the best plan found to the transaction and return its victims; None: nothing applied."""
        self.deadline = time.perf_counter() + self.budget_s
        self.cp = self.tx.checkpoint()
        if self._try([], keep=True):  # room freed earlier in this action may already do
            return []
        state = self.session.state
        rows = static_rows(state, demand_for(self.pods[0]))
        pool = [v for v in pool if any(bool(rows[r]) for r in v.nodes)]
        if not pool:
            return None
        chosen = self._per_node(pool) if self.count == 1 else self._greedy(pool)
        if chosen is None:
            return None
        for v in reversed(list(chosen)):  # prune: drop what the plan does not need
            if len(chosen) == 1 or time.perf_counter() > self.deadline:
                break
            trial = [c for c in chosen if c is not v]
            if self._try(trial, keep=False):
                chosen = trial
        if not self._try(chosen, keep=True):
            return None
        return chosen

    def _try(self, victims: list[Victim], *, keep: bool) -> bool:
        """Evict `victims` and place the job; keep the result or roll back."""
        self.tx.rollback_to(self.cp)
        for v in victims:
            if not self.allowed(v):
                self.tx.rollback_to(self.cp)
                return False
            evict(self.tx, v, self.message, label(self.job))
        ok = self.room() and place_members(self.session, self.tx, self.job, self.pods, self.count)
        if not ok or not keep:
            self.tx.rollback_to(self.cp)
        return ok

    def _per_node(self, pool: list[Victim]) -> list[Victim] | None:
        d = demand_for(self.pods[0])
        by_node: dict[int, list[Victim]] = {}
        for v in pool:
            for r in v.nodes:
                by_node.setdefault(r, []).append(v)
        best: tuple[tuple[int, int, float], list[Victim]] | None = None
        for row in sorted(by_node):
            if time.perf_counter() > self.deadline:
                break
            chosen: list[Victim] = []
            fits = False
            for v in by_node[row][:MAX_VICTIM_JOBS]:
                if not self.allowed(v):
                    continue
                evict(self.tx, v, "", label(self.job))
                chosen.append(v)
                mask, _ = self.session.feasible(d)
                if bool(mask[row]) and self.room():
                    fits = True
                    break
            self.tx.rollback_to(self.cp)
            if not fits:
                continue
            pods = sum(len(v.pods) for v in chosen)
            cost = (pods, max(v.job.priority for v in chosen), -min(v.job.created_s for v in chosen))
            if best is None or cost < best[0]:
                best = (cost, chosen)
        return best[1] if best else None

    def _greedy(self, pool: list[Victim]) -> list[Victim] | None:
        chosen: list[Victim] = []
        for v in pool[:MAX_VICTIM_JOBS]:
            if time.perf_counter() > self.deadline:
                break
            if not self.allowed(v):
                continue
            evict(self.tx, v, "", label(self.job))
            chosen.append(v)
            cp = self.tx.checkpoint()
            if self.room() and place_members(self.session, self.tx, self.job, self.pods, self.count):
                self.tx.rollback_to(self.cp)
                return chosen
            self.tx.rollback_to(cp)
        self.tx.rollback_to(self.cp)
        return None
