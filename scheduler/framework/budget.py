"""How much searching an action may do in one cycle: work counted in candidates tried, not seconds.

The actions that search (consolidate, reclaim, preempt) try candidates: a set of victims, a plan of
moves, a node for a pod with its victims. Each try is one unit of work, spent from a meter: one per
action per cycle (`Budget.action`), and inside it one per waiting job (`Meter.job`), so one hard job
cannot starve the others. Counting work rather than seconds makes a simulation, a replay or a benchmark
decide exactly the same way on a busy machine and on an idle one (their JSON is byte-identical).

The live scheduler adds a wall-clock cap on top (`BudgetLimits.wall_s`): on a real cluster a cycle must
end in time whatever the work costs there. It is the only place a clock enters a decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BudgetLimits:
    action_work: int = 600  # candidates one action may try per cycle
    job_work: int = 48  # candidates tried for one waiting job
    wall_s: float | None = None  # also stop an action after this many seconds (live scheduler only)

    @classmethod
    def live(cls, wall_s: float = 0.25) -> BudgetLimits:
        """The live scheduler's limits: the same work counts, and a wall-clock cap per action."""
        return cls(wall_s=wall_s)


class Meter:
    """Work left to one action (or one job inside it); spending on a job's meter spends its action's too."""

    def __init__(
        self, work: int, deadline: float | None, clock: Callable[[], float], parent: Meter | None = None
    ) -> None:
        self.left = work
        self.spent = 0
        self._deadline = deadline
        self._clock = clock
        self._parent = parent

    def spend(self, n: int = 1) -> None:
        self.left -= n
        self.spent += n
        if self._parent is not None:
            self._parent.spend(n)

    @property
    def exhausted(self) -> bool:
        if self.left <= 0 or (self._parent is not None and self._parent.exhausted):
            return True
        return self._deadline is not None and self._clock() > self._deadline

    def job(self, work: int) -> Meter:
        """A meter for one job: at most `work`, and no more than this meter has left."""
        return Meter(min(work, max(self.left, 0)), self._deadline, self._clock, parent=self)


class Budget:
    """Made once per scheduler and injected into every session; `action` opens one action's meter."""

    def __init__(self, limits: BudgetLimits | None = None, clock: Callable[[], float] = time.perf_counter):
        self.limits = limits or BudgetLimits()
        self._clock = clock

    def action(self) -> Meter:
        deadline = None if self.limits.wall_s is None else self._clock() + self.limits.wall_s
        return Meter(self.limits.action_work, deadline, self._clock)

    def job(self, meter: Meter) -> Meter:
        return meter.job(self.limits.job_work)
