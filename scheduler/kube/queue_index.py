"""Queue lookups for the in-process admission webhook, answered from the scheduler's Queue watch cache."""

from __future__ import annotations

from scheduler.kube.informer import Informer
from scheduler.webhook.admission import QueueKind, QueueLookup


def informer_queue_lookup(queues: Informer) -> QueueLookup:
    """`name -> "leaf" | "parent" | None` over the live Queue objects (a queue is a parent when another
    queue names it in spec.parentQueue)."""

    def kind(name: str) -> QueueKind | None:
        if queues.get(name) is None:
            return None
        is_parent = any((q.get("spec") or {}).get("parentQueue") == name for q in queues.snapshot())
        return "parent" if is_parent else "leaf"

    return kind
