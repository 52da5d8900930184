"""The order jobs are served in: queues interleaved by how far each is below its fair share."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from scheduler.jobs import Job
from scheduler.resources import RESOURCE_NAMES
from scheduler.session import Session


def dominant_share(session: Session, queue: str) -> float:
    """Largest allocated / fairShare over resources with a fair share (inf when over with none)."""
    node = session.tree.nodes[queue]
    worst = 0.0
    for r in RESOURCE_NAMES:
        fair = node.fair_share.get(r)
        used = node.allocated.get(r)
        if fair > 1e-9:
            worst = max(worst, used / fair)
        elif used > 1e-9:
            worst = max(worst, float("inf"))
    return worst


def within_quota(session: Session, queue: str) -> bool:
    """Every queue on the chain holds less GPU than its quota (-1: unlimited)."""
    for node in session.tree.ancestors(queue):
        quota = node.resource("gpu").quota
        if quota >= 0 and node.allocated.gpu >= quota - 1e-9:
            return False
    return True


def queue_key(session: Session, queue: str) -> tuple[int, int, int, float, str]:
    """(below fair share, within quota, priority, dominant resource share), as KAI orders queues."""
    share = dominant_share(session, queue)
    node = session.tree.nodes[queue]
    below = 0 if share < 1.0 else 1
    return (below, 0 if within_quota(session, queue) else 1, -node.spec.priority, share, queue)


def jobs_in_order(session: Session, jobs: list[Job]) -> Iterator[Job]:
    """Yield jobs one at a time, re-ranking a queue after each of its jobs (its share changed)."""
    by_queue: dict[str, list[Job]] = {}
    for job in jobs:
        by_queue.setdefault(job.queue, []).append(job)
    for queue_jobs in by_queue.values():
        queue_jobs.sort(key=Job.sort_key, reverse=True)  # pop() from the end gives the first
    heap = [(queue_key(session, q), q) for q in by_queue]
    heapq.heapify(heap)
    while heap:
        _, q = heapq.heappop(heap)
        yield by_queue[q].pop()
        if by_queue[q]:
            heapq.heappush(heap, (queue_key(session, q), q))
