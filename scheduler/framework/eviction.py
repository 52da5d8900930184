"""How the scheduler evicts its victims (reclaim, preempt, consolidation): KAI Scheduler's guarantee that a
queue below its quota gets it back must not depend on what the victims' owners wrote.

- **Grace period**: a victim gets at most `max_grace_s` (`--max-victim-grace`, default 30 s) to stop: the
  eviction is a deletion with that grace period when the pod asks for more
  (`terminationGracePeriodSeconds: 1000000` would keep its GPUs, and the pod the reclaim was for, waiting
  for 11.6 days). KAI deletes with the pod's own grace period.
- **Disruption budgets**: victims are evicted through the Eviction API. Where a PodDisruptionBudget
  refuses, `budgets` says what happens (`--disruption-budgets`, chart `scheduler.preemption`):
  `delete` (the default, KAI Scheduler's behaviour: KAI deletes its victims, pkg/scheduler/cache/evictor,
  and never reads a budget) deletes the pod anyway, with the capped grace period; `respect` keeps it: the
  plan is given back and, for `REFUSED_FOR_S`, the pod is no victim of any search, which picks others
  (the waiting job waits if there are none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from scheduler.model.types import PodInfo

Budgets = Literal["delete", "respect"]
BUDGET_POLICIES: tuple[Budgets, ...] = ("delete", "respect")
REFUSED_FOR_S = 60.0  # a victim whose eviction a budget refused is left out of victim searches this long


@dataclass(frozen=True)
class EvictionPolicy:
    max_grace_s: float | None = 30.0  # None: the pod's own grace period, however long
    budgets: Budgets = "delete"

    def grace_for(self, pod: PodInfo) -> float | None:
        """The grace period to evict `pod` with: None (its own) unless that is longer than the cap."""
        if self.max_grace_s is None or pod.grace_s <= self.max_grace_s:
            return None
        return self.max_grace_s

    def terminates_within(self, pod: PodInfo) -> float:
        """How long an evicted `pod` may still be terminating."""
        capped = self.grace_for(pod)
        return pod.grace_s if capped is None else capped
