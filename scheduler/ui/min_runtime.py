"""Minimum runtimes and elastic gangs on the dashboard: each queue's minimum runtimes (and where it
inherits them from), how long a running pod's job is still protected (docs/min-runtime.md), and what an
elastic gang with members waiting already runs (docs/elastic.md)."""

from __future__ import annotations

from scheduler.api.duration import show_duration
from scheduler.model.jobs import JobFacts
from scheduler.queues.min_runtime import MinRuntimes, job_started_s, protected_until
from scheduler.queues.tree import QueueTree


def _source(tree: QueueTree, name: str, preempt: bool) -> str | None:
    """The queue whose value `name` uses (itself or the nearest ancestor that sets it), or None."""
    for node in tree.ancestors(name):
        if (node.spec.preempt_min_runtime if preempt else node.spec.reclaim_min_runtime) is not None:
            return node.name
    return None


def queue_min_runtime(tree: QueueTree, name: str) -> str:
    """E.g. "min runtime: preempt 5m (from lab) · reclaim 10m"; "" when neither applies."""
    preempt_s, reclaim_s = MinRuntimes(tree).configured(name)
    parts = []
    for word, seconds, preempt in (("preempt", preempt_s, True), ("reclaim", reclaim_s, False)):
        source = _source(tree, name, preempt)
        if source is None or seconds <= 0:
            continue
        inherited = f" (from {source})" if source != name else ""
        parts.append(f"{word} {show_duration(seconds)}{inherited}")
    return f"min runtime: {' · '.join(parts)}" if parts else ""


def protection_notes(tree: QueueTree, jobs: list[JobFacts], now_epoch_s: float) -> dict[str, str]:
    """Pod uid -> "protected from preemption for 4m, from reclaim by sibling queues for 9m" for the
    running pods whose job is still younger than a minimum runtime of its queue."""
    runtimes = MinRuntimes(tree)
    out: dict[str, str] = {}
    for f in jobs:
        job = f.job
        if not f.running or job.queue not in tree.nodes:
            continue
        started = job_started_s(f.running, now_epoch_s)
        preempt_s, reclaim_s = runtimes.configured(job.queue)
        parts = []
        for word, seconds in (("preemption", preempt_s), ("reclaim by sibling queues", reclaim_s)):
            until = protected_until(started, seconds, now_epoch_s)
            if until is not None:
                parts.append(f"from {word} for {show_duration(until - now_epoch_s)}")
        if parts:
            extra = (
                " (members above minMember excepted)"
                if job.is_gang and len(f.running) + job.succeeded > job.min_member
                else ""
            )
            note = f"protected {', '.join(parts)}{extra}"
            for p in f.running:
                out[p.uid] = note
    return out


def elastic_notes(jobs: list[JobFacts]) -> dict[str, str]:
    """PodGroup key -> "elastic: 5 of 8 running, minMember 2" for gangs that run at least their minMember
    and have members waiting to grow into."""
    out: dict[str, str] = {}
    for f in jobs:
        job = f.job
        held = len(f.running) + job.succeeded
        if job.is_gang and f.pending and held >= job.min_member:
            total = held + len(f.pending)
            out[job.key] = f"elastic: {len(f.running)} of {total} running, minMember {job.min_member}"
    return out
