"""Fair share, recomputed every cycle from current demand (KAI Scheduler's semantics).

Per resource and per level of the tree, starting with the cluster's capacity at the roots:
1. each queue deserves min(quota, requested) (quota -1: all it requests), handed out by queue priority;
   when capacity is short inside one priority, in proportion to what each deserves. (KAI's docs hand
   every queue its full deserved share even past capacity; scaling keeps fair shares inside the
   cluster, so reclaim divides an over-promised cluster in proportion to quota instead of leaving it to
   whoever came first. With enough capacity for all quotas the two agree.);
2. what is left goes to priority buckets in descending order, inside a bucket in proportion to
   overQuotaWeight (water-filling), each queue capped by its request and its limit;
3. a queue's fair share becomes the amount divided among its children, and so on down the tree.
"""

from __future__ import annotations

import math
from itertools import groupby

from scheduler.queues.tree import QueueNode, QueueTree
from scheduler.resources import RESOURCE_NAMES, Resources

EPS = 1e-9


def compute_fair_shares(tree: QueueTree, capacity: Resources) -> None:
    shares: dict[str, dict[str, float]] = {name: {} for name in tree.nodes}
    for r in RESOURCE_NAMES:
        _divide(tree, tree.roots, capacity.get(r), r, shares)
    for name, per_resource in shares.items():
        tree.nodes[name].fair_share = Resources.of(per_resource)


def _by_priority(nodes: list[QueueNode]) -> list[list[QueueNode]]:
    ordered = sorted(nodes, key=lambda n: (-n.spec.priority, n.name))
    return [list(group) for _, group in groupby(ordered, key=lambda n: n.spec.priority)]


def _divide(
    tree: QueueTree, names: list[str], amount: float, r: str, out: dict[str, dict[str, float]]
) -> None:
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

    for bucket in _by_priority(nodes):  # 2. over quota, by weight
        active = [
            n for n in bucket if n.resource(r).over_quota_weight > 0 and share[n.name] < cap[n.name] - EPS
        ]
        while remaining > EPS and active:
            weights = sum(n.resource(r).over_quota_weight for n in active)
            pool = remaining
            for n in active:
                give = min(pool * n.resource(r).over_quota_weight / weights, cap[n.name] - share[n.name])
                share[n.name] += give
                remaining -= give
            active = [n for n in active if share[n.name] < cap[n.name] - EPS]

    for n in nodes:
        out[n.name][r] = share[n.name]
        if n.children:
            _divide(tree, n.children, share[n.name], r, out)
