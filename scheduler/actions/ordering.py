"""The order jobs are served in: queues compared level by level of the tree, as KAI Scheduler orders them.

At each level the sibling queues with waiting work are compared, each with the next job it would serve
(its best descendant's), and the first is descended into until a leaf gives its next job. After every job
the order is recomputed: what the job took changed its queues' figures. Two siblings compare by, in turn
(KAI's `proportion` queue order):

1. a queue not over its fair share (over: every resource above it) before one that is;
2. a queue that stays within its quota with the job before one that would not (so a job that fits in its
   quota is placed before another queue's job that would need reclaiming back later);
3. the higher queue priority;
4. a queue with no share of a resource the job asks for goes last;
5. the smaller dominant resource share with the job (allocated + job over what the queue may hold);
6. the smaller dominant resource share without it;
7. the queue that may hold less (the weaker one);
8. the older queue (then the name, so the order is total).

Inside a queue: higher priority, then a gang below its minMember before one at it before an elastic one
above it, then the older job.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator

from scheduler.actions.queue_checks import EPS, allocatable, quota_of
from scheduler.framework.session import Session, cluster_capacity
from scheduler.model.jobs import Job
from scheduler.model.resources import RESOURCE_NAMES, Resources
from scheduler.queues.tree import QueueNode

NO_SHARE_PENALTY = 1000.0  # KAI's multiplier of what a queue holds of a resource it has no share of


def job_request(session: Session, job: Job) -> Resources:
    """What the job asks to start: the members it places now (one when it is elastic)."""
    f = session.facts(job)
    return session.request_of(list(f.pending[: f.need] if f.need > 0 else f.pending[:1]))


def _over_fair_share(node: QueueNode) -> bool:
    return all(node.fair_share.get(r) < node.allocated.get(r) - EPS for r in RESOURCE_NAMES)


def _within_quota(node: QueueNode, req: Resources) -> bool:
    return all(node.allocated.get(r) + req.get(r) <= quota_of(node, r) + EPS for r in RESOURCE_NAMES)


def _zero_share_violation(node: QueueNode, req: Resources) -> bool:
    return any(
        allocatable(node, r) <= EPS and node.allocated.get(r) + req.get(r) > EPS for r in RESOURCE_NAMES
    )


def dominant_share(node: QueueNode, extra: Resources, total: Resources) -> float:
    worst = 0.0
    for r in RESOURCE_NAMES:
        cap = allocatable(node, r)
        if math.isinf(cap):
            cap = total.get(r)
        used = node.allocated.get(r) + extra.get(r)
        worst = max(worst, used * NO_SHARE_PENALTY if cap <= EPS else used / cap)
    return worst


def _sign(a: float, b: float) -> int:
    return -1 if a < b - 1e-12 else (1 if a > b + 1e-12 else 0)


def compare_queues(
    left: QueueNode, lreq: Resources, right: QueueNode, rreq: Resources, total: Resources
) -> int:
    """-1 when `left` (asking `lreq` next) is served before `right`, 1 after (never 0 for two queues)."""
    checks = (
        (_over_fair_share(left), _over_fair_share(right)),
        (not _within_quota(left, lreq), not _within_quota(right, rreq)),
        (-left.spec.priority, -right.spec.priority),
        (_zero_share_violation(left, lreq), _zero_share_violation(right, rreq)),
        (dominant_share(left, lreq, total), dominant_share(right, rreq, total)),
        (dominant_share(left, Resources(), total), dominant_share(right, Resources(), total)),
    )
    for a, b in checks:
        if (c := _sign(float(a), float(b))) != 0:
            return c
    la = [allocatable(left, r) for r in RESOURCE_NAMES]
    ra = [allocatable(right, r) for r in RESOURCE_NAMES]
    if la != ra:
        if all(x <= y for x, y in zip(la, ra, strict=True)):
            return -1
        if all(y <= x for x, y in zip(la, ra, strict=True)):
            return 1
    lc, rc = left.created, right.created
    if lc and rc and lc != rc:
        return -1 if lc < rc else 1
    return -1 if left.name < right.name else (1 if left.name > right.name else 0)


class JobOrder:
    """Pops jobs in KAI's order; call `jobs()` to iterate (re-ranking after every job)."""

    def __init__(self, session: Session, jobs: list[Job]) -> None:
        self.session = session
        self.total = cluster_capacity(session.state)
        self.by_queue: dict[str, list[Job]] = {}
        self._keys: dict[
            str, tuple[int, int, float, str]
        ] = {}  # each job's rank in its queue, as last served
        for job in jobs:
            self.by_queue.setdefault(job.queue, []).append(job)
            self._keys[job.key] = session.facts(job).sort_key()
        for queue_jobs in self.by_queue.values():
            queue_jobs.sort(key=self._key, reverse=True)  # pop() from the end gives the first
        self._requests: dict[str, Resources] = {}

    def _key(self, job: Job) -> tuple[int, int, float, str]:
        return self._keys[job.key]

    def _head(self, queue: str) -> Job:
        return self.by_queue[queue][-1]

    def _request(self, job: Job) -> Resources:
        if job.key not in self._requests:
            self._requests[job.key] = job_request(self.session, job)
        return self._requests[job.key]

    def _best_leaf(self, names: list[str]) -> str | None:
        """The leaf whose next job goes first among the subtrees of `names` (siblings): each queue's
        subtree is judged after its children's, in one loop (the tree may be MAX_QUEUE_DEPTH deep)."""
        tree = self.session.tree

        def cmp(a: tuple[str, str], b: tuple[str, str]) -> int:
            (na, la), (nb, lb) = a, b
            return compare_queues(
                tree.nodes[na], self._request(self._head(la)), tree.nodes[nb], self._request(self._head(lb)),
                self.total,
            )  # fmt: skip

        def best(siblings: list[str]) -> str | None:
            named = [(n, leaf) for n in siblings if (leaf := leaf_of[n]) is not None]
            return min(named, key=functools.cmp_to_key(cmp))[1] if named else None

        order, stack = [], list(names)
        while stack:  # every queue under `names`, parents before their children
            name = stack.pop()
            order.append(name)
            stack.extend(tree.nodes[name].children)
        leaf_of: dict[str, str | None] = {}  # the leaf whose job the queue's subtree would serve next
        for name in reversed(order):  # children before their parents
            node = tree.nodes[name]
            if node.children:
                leaf_of[name] = best(node.children)
            else:
                leaf_of[name] = name if self.by_queue.get(name) else None
        return best(names)

    def push(self, job: Job) -> None:
        """Serve `job` again, in its turn (an elastic gang after each member it places)."""
        queue_jobs = self.by_queue.setdefault(job.queue, [])
        queue_jobs.append(job)
        self._keys[job.key] = self.session.facts(job).sort_key()  # what it placed moved it down
        queue_jobs.sort(key=self._key, reverse=True)
        self._requests.pop(job.key, None)

    def jobs(self) -> Iterator[Job]:
        tree = self.session.tree
        while True:
            # Leaves of queues missing from the tree (unknown queues) are served last, by name.
            leaf = self._best_leaf(tree.roots)
            if leaf is None:
                rest = sorted(q for q, js in self.by_queue.items() if js and q not in tree.nodes)
                if not rest:
                    return
                leaf = rest[0]
            yield self.by_queue[leaf].pop()


def jobs_in_order(session: Session, jobs: list[Job]) -> Iterator[Job]:
    """Yield jobs one at a time in KAI's queue order, re-ranking after each job."""
    return JobOrder(session, jobs).jobs()
