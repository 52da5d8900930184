"""Queue lookups for the in-process admission webhook, answered from the scheduler's Queue watch cache: does
a queue exist, is it a leaf, may a namespace use it."""

from __future__ import annotations

from scheduler.api.limits import MAX_QUEUE_DEPTH
from scheduler.api.tenancy import namespace_problem
from scheduler.kube.informer import Informer
from scheduler.webhook.admission import NamespaceCheck, QueueKind, QueueLookup


def informer_queue_lookup(queues: Informer) -> QueueLookup:
    """`name -> "leaf" | "parent" | None` over the live Queue objects (a queue is a parent when another
    queue names it in spec.parentQueue)."""

    def kind(name: str) -> QueueKind | None:
        if queues.get(name) is None:
            return None
        is_parent = any((q.get("spec") or {}).get("parentQueue") == name for q in queues.snapshot())
        return "parent" if is_parent else "leaf"

    return kind


def informer_namespace_check(queues: Informer) -> NamespaceCheck:
    """`(queue, namespace) -> why not | None` over the live Queue objects: the namespaces the queue and its
    ancestors name (`spec.namespaces`, docs/tenancy.md), walked up at most MAX_QUEUE_DEPTH parents."""

    def check(name: str, namespace: str) -> str | None:
        chain: list[tuple[str, list[str] | None]] = []
        seen: set[str] = set()
        cur: str | None = name
        while cur is not None and cur not in seen and len(chain) < MAX_QUEUE_DEPTH:
            seen.add(cur)
            obj = queues.get(cur)
            spec = (obj or {}).get("spec") or {}
            allowed = spec.get("namespaces")
            chain.append((cur, [str(n) for n in allowed] if isinstance(allowed, list) else None))
            parent = spec.get("parentQueue")
            cur = str(parent) if parent else None
        return namespace_problem(name, namespace, chain)

    return check
