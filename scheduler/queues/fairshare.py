"""Fair share, recomputed every cycle from current demand (KAI Scheduler's semantics).

Per resource and per level of the tree, starting with the cluster's capacity at the roots:
1. each queue deserves min(quota, requested) (quota -1: all it requests), handed out by queue priority;
   when capacity is short inside one priority, in proportion to what each deserves. (KAI's docs hand
   every queue its full deserved share even past capacity; scaling keeps fair shares inside the
   cluster, so reclaim divides an over-promised cluster in proportion to quota instead of leaving it to
   whoever came first. With enough capacity for all quotas the two agree.);
2. what is left goes to priority buckets in descending order, inside a bucket in proportion to
   overQuotaWeight (water-filling), each queue capped by its request and its limit; with time-based fair
   share, in proportion to KAI's portion instead (below);
3. a queue's fair share becomes the amount divided among its children, and so on down the tree.

Time-based fair share (KAI Scheduler's; `usage_history.py`, docs/fairshare.md): given each queue's recent
usage U' (0..1 of the cluster, per resource) and kValue k, each round of step 2 divides by

    P_i = max(0, W'_i + k * (W'_i - U'_i)),   share_i = P_i / sum_j P_j

where W'_i is the queue's overQuotaWeight over the sum of the weights of the queues still taking in its
bucket. No usage (or k = 0) gives back the weights; when every P is 0, the weights are used. Deserved
quota (step 1) and priority are never affected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import groupby

from scheduler.model.resources import RESOURCE_NAMES, Resources
from scheduler.queues.tree import QueueNode, QueueTree

EPS = 1e-9


def compute_fair_shares(
    tree: QueueTree, capacity: Resources, usage: Mapping[str, Resources] | None = None, k_value: float = 1.0
) -> None:
    """`usage`: each queue's recent usage (time-based fair share), None: off."""
    shares: dict[str, dict[str, float]] = {name: {} for name in tree.nodes}
    for r in RESOURCE_NAMES:
        # Level by level from the top (a loop, not a recursion: the tree may be MAX_QUEUE_DEPTH deep).
        todo: list[tuple[list[str], float]] = [(tree.roots, capacity.get(r))]
        while todo:
            names, amount = todo.pop()
            todo.extend(_divide(tree, names, amount, r, shares, usage, k_value))
    for name, per_resource in shares.items():
        tree.nodes[name].fair_share = Resources.of(per_resource)


def _by_priority(nodes: list[QueueNode]) -> list[list[QueueNode]]:
    ordered = sorted(nodes, key=lambda n: (-n.spec.priority, n.name))
    return [list(group) for _, group in groupby(ordered, key=lambda n: n.spec.priority)]


def portions(
    active: list[QueueNode], r: str, usage: Mapping[str, Resources] | None, k: float
) -> dict[str, float]:
    """What share of an over-quota round each queue gets: its weight, or KAI's time-based portion."""
    weights = {n.name: n.resource(r).over_quota_weight for n in active}
    total = sum(weights.values())
    plain = {name: w / total for name, w in weights.items()}
    if usage is None or k <= 0:
        return plain
    used = {name: usage[name].get(r) if name in usage else 0.0 for name in plain}
    p = {name: max(0.0, w + k * (w - used[name])) for name, w in plain.items()}
    total_p = sum(p.values())
    return {name: v / total_p for name, v in p.items()} if total_p > EPS else plain


def _divide(
    tree: QueueTree,
    names: list[str],
    amount: float,
    r: str,
    out: dict[str, dict[str, float]],
    usage: Mapping[str, Resources] | None = None,
    k_value: float = 1.0,
) -> list[tuple[list[str], float]]:
    """Divide `amount` of resource `r` among the siblings `names` (into `out`); returns each one's children
    with the amount they divide next."""
    nodes = [tree.nodes[n] for n in names]
    cap: dict[str, float] = {}
    share: dict[str, float] = {}
    for n in nodes:
        res = n.resource(r)
        limit = res.limit if res.limit >= 0 else math.inf
        cap[n.name] = min(n.requested.get(r), limit)
        share[n.name] = 0.0
    remaining = max(amount, 0.0)

    for bucket in _by_priority(nodes):  # 1. deserved quota
        deserved = {n.name: min(n.resource(r).quota if n.resource(r).quota >= 0 else math.inf, cap[n.name])
                    for n in bucket}  # fmt: skip
        want = sum(deserved.values())
        scale = 1.0 if want <= remaining else (remaining / want if want > 0 else 0.0)
        for name, d in deserved.items():
            share[name] = d * scale
        remaining -= min(want, remaining)

    for bucket in _by_priority(nodes):  # 2. over quota, by weight (and recent usage, time-based)
        active = [
            n for n in bucket if n.resource(r).over_quota_weight > 0 and share[n.name] < cap[n.name] - EPS
        ]
        while remaining > EPS and active:
            portion = portions(active, r, usage, k_value)
            pool = remaining
            for n in active:
                give = min(pool * portion[n.name], cap[n.name] - share[n.name])
                share[n.name] += give
                remaining -= give
            active = [n for n in active if share[n.name] < cap[n.name] - EPS]

    for n in nodes:
        out[n.name][r] = share[n.name]
    return [(n.children, share[n.name]) for n in nodes if n.children]
