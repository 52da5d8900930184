"""Which namespaces may use a queue: the one rule the webhook and the scheduler both apply (docs/tenancy.md).

A Queue may name the namespaces whose pods and PodGroups may use it, `spec.namespaces`; unset, every
namespace may. A namespace may use a leaf queue when the leaf and every ancestor that names namespaces
name it: a parent queue's list bounds all the queues under it.
"""

from __future__ import annotations

from collections.abc import Sequence

Chain = Sequence[tuple[str, Sequence[str] | None]]  # (queue, its spec.namespaces), the leaf first


def namespace_problem(queue: str, namespace: str, chain: Chain) -> str | None:
    """Why pods and PodGroups of `namespace` may not use `queue` (None: they may)."""
    for name, allowed in chain:
        if allowed is not None and namespace not in allowed:
            where = "its" if name == queue else f"its parent {name}'s"
            names = ", ".join(allowed) if allowed else "none"
            return (
                f"namespace {namespace} may not use queue {queue} ({where} spec.namespaces: {names}); use a "
                "queue open to it"
            )
    return None
