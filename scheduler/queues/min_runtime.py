"""Minimum runtimes: how long a job runs before it may be a victim (KAI Scheduler's `minruntime` plugin).

A Queue's `preemptMinRuntime` and `reclaimMinRuntime` (`scheduler/api/queue.py`) are unset by default:
a queue without one takes its parent's, and a top-level queue without one has 0 (no protection).
Which queue's value applies:

- **preempt** (inside one queue): the victim's queue, walking up the tree to the first queue that sets it;
- **reclaim** (across queues): KAI's default "lca" resolution. Take the reclaimer's and the victim's
  queues' lowest common ancestor, step one level down towards the victim, and walk up from there to the
  first queue that sets it. Two top-level queues count as siblings under an implicit root, so the victim's
  top-level queue decides. A leaf queue's own value therefore protects it from its siblings only; what
  protects it from cousins is set on the ancestor they do not share (KAI's reasoning: whoever administers
  a subtree decides how its parts treat each other).

KAI also offers "queue" resolution (always the victim's leaf value) and cluster-wide defaults in its
scheduler configuration; Tessera has neither: a default is a value on the top-level queues
(docs/differences-from-kai.md).

A job's age is measured from its start: the earliest `status.startTime` of its running pods (a pod bound
but not yet started counts as starting now; KAI stamps a job when it allocates it from nothing). Protection applies to a job as a whole: an elastic gang's
members above its minMember may always go, one at a time, as in KAI (its scenario validator only refuses
plans that take a protected job below minMember).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler.model.types import PodInfo, PodPhase
from scheduler.queues.tree import QueueNode, QueueTree


def _first_set(chain: Iterable[QueueNode], preempt: bool) -> float:
    for node in chain:
        value = node.spec.preempt_min_runtime_s if preempt else node.spec.reclaim_min_runtime_s
        if value is not None:
            return value
    return 0.0


@dataclass
class MinRuntimes:
    """The min runtime that applies between queues, resolved once per pair per cycle."""

    tree: QueueTree
    _preempt: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _reclaim: dict[tuple[str, str], float] = field(default_factory=dict, init=False, repr=False)
    _none: bool | None = field(default=None, init=False, repr=False)

    @property
    def none_set(self) -> bool:
        """No queue sets a minimum runtime (the common case: nothing to check)."""
        if self._none is None:
            self._none = all(
                n.spec.preempt_min_runtime is None and n.spec.reclaim_min_runtime is None
                for n in self.tree.nodes.values()
            )
        return self._none

    def preempt_s(self, victim_queue: str) -> float:
        """Seconds a job of `victim_queue` runs before a job of its own queue may preempt it."""
        if victim_queue not in self._preempt:
            chain = self.tree.ancestors(victim_queue) if victim_queue in self.tree.nodes else []
            self._preempt[victim_queue] = _first_set(chain, preempt=True)
        return self._preempt[victim_queue]

    def reclaim_s(self, reclaimer_queue: str, victim_queue: str) -> float:
        """Seconds a job of `victim_queue` runs before `reclaimer_queue` may reclaim it."""
        key = (reclaimer_queue, victim_queue)
        if key not in self._reclaim:
            self._reclaim[key] = self._resolve_reclaim(reclaimer_queue, victim_queue)
        return self._reclaim[key]

    def _resolve_reclaim(self, reclaimer_queue: str, victim_queue: str) -> float:
        if victim_queue not in self.tree.nodes:
            return 0.0
        theirs = self.tree.ancestors(victim_queue)  # the victim's queue first, its root last
        mine = (
            {n.name for n in self.tree.ancestors(reclaimer_queue)}
            if reclaimer_queue in self.tree.nodes
            else set()
        )
        # The victim's ancestor just below the lowest common ancestor (its root when they share none).
        below = next((i - 1 for i, node in enumerate(theirs) if node.name in mine), len(theirs) - 1)
        return _first_set(theirs[max(below, 0) :], preempt=False)

    def configured(self, queue: str) -> tuple[float, float]:
        """(preempt, reclaim) seconds a queue's jobs get, inherited down the tree (the dashboard's view;
        reclaim as its siblings see it: cousins are held to their common ancestor's child's value)."""
        if queue not in self.tree.nodes:
            return (0.0, 0.0)
        chain = self.tree.ancestors(queue)
        return (_first_set(chain, preempt=True), _first_set(chain, preempt=False))


def job_started_s(pods: Iterable[PodInfo], now_epoch_s: float) -> float | None:
    """When a job started: its earliest pod's `status.startTime`; a pod bound but not started yet (the
    watch shows it bound, or not yet: bound by this scheduler) counts as starting now. None when no pod
    says (a running pod without a start time, which no kubelet leaves): such a job is not protected, as a
    KAI job without its last-start timestamp."""
    starts = [
        p.started_s if p.started_s is not None else (now_epoch_s if p.phase is not PodPhase.RUNNING else None)
        for p in pods
    ]
    known = [s for s in starts if s is not None]
    return min(known) if known else None


def protected_until(started_epoch_s: float | None, min_runtime_s: float, now_epoch_s: float) -> float | None:
    """The Unix time protection ends, or None when the job may be a victim now."""
    if started_epoch_s is None or min_runtime_s <= 0:
        return None
    until = started_epoch_s + min_runtime_s
    return until if now_epoch_s < until else None
