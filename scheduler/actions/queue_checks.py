"""Which queue may take resources back from which: KAI Scheduler's reclaim rules (its `proportion` plugin).

A queue may reclaim for a job only if, with the job, it stays within its fair share (and a
non-preemptible job within its queue's quota). Each victim is then taken under one of two strategies,
judged on its queue *before* that victim is taken (the queues compared are the two sides' children of
their lowest common ancestor: above it nothing moves):

1. maintain fair share: the victim's queue is over what it may hold (its quota or fair share, whichever is
   larger, capped by its limit) in some resource;
2. guarantee quota: the reclaiming queue, with the job, stays within its quota, and the victim's queue is
   over its quota in some resource.

So a queue below its quota always gets it back, even when the other queue's excess sits in one big job or
gang (taking it may leave that queue below its own fair share: it was over it before). Last, on each
level of the reclaiming queue's chain, a reclaimer that ends over its fair share must stay strictly less
saturated (allocated / fair share) than every sibling it took from, so two queues cannot take turns
reclaiming from each other (no ping-pong).

Every check returns None when it passes, else the sentence that names the rule (it becomes the pod's
reason). Figures are read from `Figures`, a snapshot taken before the search tried anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.model.resources import RESOURCE_NAMES, Resources
from scheduler.queues.tree import QueueNode, QueueTree

EPS = 1e-6


def quota_of(node: QueueNode, r: str) -> float:
    q = node.resource(r).quota
    return q if q >= 0 else math.inf


def limit_of(node: QueueNode, r: str) -> float:
    q = node.resource(r).limit
    return q if q >= 0 else math.inf


def allocatable(node: QueueNode, r: str) -> float:
    """What the queue may hold before it counts as over its share: quota or fair share, whichever is
    larger, capped by its limit (an unlimited quota: its limit)."""
    quota = quota_of(node, r)
    if math.isinf(quota):
        return limit_of(node, r)
    return min(limit_of(node, r), max(quota, node.fair_share.get(r)))


def involved(request: Resources) -> tuple[str, ...]:
    """The resources a request is about (those it asks any of)."""
    return tuple(r for r in RESOURCE_NAMES if request.get(r) > EPS)


@dataclass(frozen=True)
class Figures:
    """Each queue's allocation as the search for one job started (the tree's figures move with every
    trial eviction; the rules judge the state before the plan), and per-queue bounds a search asks for
    again and again (a queue's quota and what it may hold do not change during a cycle)."""

    allocated: dict[str, Resources]
    allocated_np: dict[str, Resources]
    quota: dict[str, dict[str, float]]
    allocatable: dict[str, dict[str, float]]

    @classmethod
    def of(cls, tree: QueueTree) -> Figures:
        return cls(
            {n: node.allocated for n, node in tree.nodes.items()},
            {n: node.allocated_np for n, node in tree.nodes.items()},
            {n: _quota(node) for n, node in tree.nodes.items()},
            {n: _allocatable(node) for n, node in tree.nodes.items()},
        )


def leveled(tree: QueueTree, reclaimer: str, victim: str) -> tuple[QueueNode, QueueNode]:
    """The two queues compared: the reclaimer's and the victim's ancestors just below their lowest common
    ancestor (the roots when they share none)."""
    mine = list(reversed(tree.ancestors(reclaimer)))  # root first
    theirs = list(reversed(tree.ancestors(victim)))
    for a, b in zip(mine, theirs, strict=False):
        if a.name != b.name:
            return a, b
    depth = min(len(mine), len(theirs))
    return mine[depth - 1], theirs[depth - 1]


def _over(amount: Resources, bound: dict[str, float]) -> str | None:
    """The first resource in which `amount` exceeds `bound`."""
    return next((r for r in RESOURCE_NAMES if amount.get(r) > bound[r] + EPS), None)


def _within(amount: Resources, bound: dict[str, float]) -> bool:
    return _over(amount, bound) is None


def _quota(node: QueueNode) -> dict[str, float]:
    return {r: quota_of(node, r) for r in RESOURCE_NAMES}


def _allocatable(node: QueueNode) -> dict[str, float]:
    return {r: allocatable(node, r) for r in RESOURCE_NAMES}


def _fair(node: QueueNode) -> dict[str, float]:
    return {r: node.fair_share.get(r) for r in RESOURCE_NAMES}


def can_reclaim(tree: QueueTree, queue: str, request: Resources, preemptible: bool) -> str | None:
    """Whether `queue` may reclaim for a job asking `request` at all (KAI's `CanReclaimResources`)."""
    node = tree.nodes[queue]
    r = _over(node.allocated + request, _fair(node))
    if r is not None:
        held, fair = node.allocated.get(r), node.fair_share.get(r)
        where = (
            "is over its fair share"
            if held > fair + EPS
            else "is at its fair share"
            if held >= fair - EPS
            else "would pass its fair share with it"
        )
        return (
            f"queue {queue} {where} (it holds {amount(r, held)}; fair share {amount(r, fair)}, quota "
            f"{amount(r, quota_of(node, r))}); {amount(r, request.get(r))} more waits for idle capacity"
        )
    if not preemptible and (r := _over(node.allocated_np + request, _quota(node))) is not None:
        return f"non-preemptible work only reclaims within quota: queue {queue} would pass its {r} quota"
    return None


def victim_candidate(tree: QueueTree, reclaimer: str, request: Resources, victim: str) -> bool:
    """A cheap filter before the search (KAI's `FilterVictim`): could any strategy take from `victim`?"""
    mine, theirs = leveled(tree, reclaimer, victim)
    if not _within(mine.allocated + request, _quota(mine)):  # only "maintain fair share" can apply
        return _over(theirs.allocated, _allocatable(theirs)) is not None
    under = False
    for r in involved(request):
        quota = quota_of(theirs, r)
        if math.isinf(quota):
            continue
        if theirs.allocated.get(r) > quota + EPS:
            return True
        if theirs.allocated.get(r) < quota - EPS:
            under = True
    return not under


def reclaimable(
    tree: QueueTree,
    figures: Figures,
    reclaimer: str,
    request: Resources,
    preemptible: bool,
    victims: Iterable[tuple[str, Resources]],
) -> str | None:
    """Whether taking `victims` ((queue, usage), in the order they would be taken) for a job of
    `reclaimer` asking `request` keeps KAI's rules; else the sentence naming the rule it breaks."""
    remaining: dict[str, Resources] = {}
    taken: dict[str, set[str]] = {}  # queue -> resources its victims hold
    for queue, usage in victims:
        mine, theirs = leveled(tree, reclaimer, queue)
        left = remaining.setdefault(theirs.name, figures.allocated[theirs.name])
        fair_ok = _over(left, figures.allocatable[theirs.name]) is not None
        mine_in_quota = _within(figures.allocated[mine.name] + request, figures.quota[mine.name])
        quota_ok = mine_in_quota and _over(left, figures.quota[theirs.name]) is not None
        if not (fair_ok or quota_ok):
            r = next(iter(involved(usage) or ("gpu",)))
            return (
                f"queue {theirs.name} holds {amount(r, left.get(r))}, not over its share "
                f"({amount(r, allocatable(theirs, r))}); "
                + (
                    f"queue {mine.name} is not below its quota"
                    if not mine_in_quota
                    else f"nor over its quota ({amount(r, quota_of(theirs, r))})"
                )
            )
        for node in tree.ancestors(queue):
            remaining[node.name] = remaining.get(node.name, figures.allocated[node.name]) - usage
            taken.setdefault(node.name, set()).update(involved(usage))
    asked = set(involved(request))
    for node in tree.ancestors(reclaimer):
        mine_after = remaining.get(node.name, figures.allocated[node.name]) + request
        for sibling, left in remaining.items():
            other = tree.nodes[sibling]
            if other.parent != node.parent or sibling == node.name:
                continue
            for res in sorted(taken.get(sibling, set()) | asked):
                ratio = _saturation(mine_after.get(res), node.fair_share.get(res))
                level = _saturation(left.get(res), other.fair_share.get(res))
                if ratio > 1 + EPS and other.fair_share.get(res) > 0 and ratio >= level - EPS:
                    return (
                        f"queue {node.name} would end {ratio:.2f}x its fair share of {res}, no less saturated "
                        f"than queue {sibling} ({level:.2f}x)"
                    )
        over = _over(figures.allocated_np[node.name] + request, figures.quota[node.name])
        if not preemptible and over is not None:
            return f"non-preemptible work only reclaims within quota: queue {node.name} would pass its {over} quota"
    return None


def _saturation(allocated: float, fair: float) -> float:
    if fair <= 0:
        return math.inf if allocated > EPS else 0.0
    return allocated / fair


def amount(r: str, v: float) -> str:
    if math.isinf(v):
        return "unlimited"
    if r == "gpu":
        return f"{v:g} GPU" + ("" if abs(v - 1) < 1e-9 else "s")
    if r == "cpu":
        return f"{v / 1000:g} CPUs"
    return f"{v:g} MiB memory"
