"""Queue conditions for moving resources between queues (KAI Scheduler's two reclaim strategies).

1. fair share: a queue below its fair share may take from queues above theirs; after the move the
   reclaimer is still at or below its fair share and every victim queue at or above its own;
2. quota: a queue below its quota may take from queues above their quota; after the move the reclaimer is
   still within its quota and every victim queue keeps at least its quota.
Either way a victim queue never drops below its deserved quota, and neither queue can reclaim it back
next cycle (no ping-pong). In a tree, the conditions hold for each queue on the reclaimer's and on the
victim's side below their lowest common ancestor (above it, nothing moves).
"""

from __future__ import annotations

import math
from typing import Literal

from scheduler.queues.tree import QueueNode, QueueTree
from scheduler.resources import Resources

EPS = 1e-6
Mode = Literal["fair", "quota"]


def contended(request: Resources) -> tuple[str, ...]:
    """The resources a move is about: GPUs when the job asks for any, else CPU and memory."""
    if request.gpu > 0:
        return ("gpu",)
    return tuple(r for r in ("cpu", "memory") if request.get(r) > 0)


def quota_of(node: QueueNode, r: str) -> float:
    q = node.resource(r).quota
    return q if q >= 0 else math.inf


def side(tree: QueueTree, queue: str, other: str) -> list[QueueNode]:
    """`queue` and its parents that are not also parents of `other`."""
    shared = {n.name for n in tree.ancestors(other)}
    return [n for n in tree.ancestors(queue) if n.name not in shared]


def reclaimer_ok(chain: list[QueueNode], request: Resources, names: tuple[str, ...], mode: Mode) -> bool:
    for n in chain:
        for r in names:
            bound = n.fair_share.get(r) if mode == "fair" else quota_of(n, r)
            if n.allocated.get(r) + request.get(r) > bound + EPS:
                return False
    return True


def victim_ok(chain: list[QueueNode], usage: Resources, names: tuple[str, ...], mode: Mode) -> bool:
    for n in chain:
        for r in names:
            deserved = min(quota_of(n, r), n.requested.get(r))
            bound = max(n.fair_share.get(r), deserved) if mode == "fair" else quota_of(n, r)
            if n.allocated.get(r) - usage.get(r) < bound - EPS:
                return False
    return True


def may_reclaim(tree: QueueTree, queue: str, request: Resources, victim_queue: str, usage: Resources) -> bool:
    names = contended(request)
    mine, theirs = side(tree, queue, victim_queue), side(tree, victim_queue, queue)
    return any(
        reclaimer_ok(mine, request, names, mode) and victim_ok(theirs, usage, names, mode)
        for mode in ("fair", "quota")
    )


def amount(r: str, v: float) -> str:
    if math.isinf(v):
        return "unlimited"
    if r == "gpu":
        return f"{v:g} GPU" + ("" if abs(v - 1) < 1e-9 else "s")
    if r == "cpu":
        return f"{v / 1000:g} CPUs"
    return f"{v:g} MiB memory"
