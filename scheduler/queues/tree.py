"""The queue tree built from `Queue` objects: parents, leaves, ancestors, per-queue usage."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler.api.keys import DEFAULT_QUEUE
from scheduler.api.meta import ObjectMeta
from scheduler.api.queue import Queue, QueueResource, QueueSpec
from scheduler.model.resources import RESOURCE_NAMES, Resources


class QueueTreeError(ValueError):
    pass


@dataclass
class QueueNode:
    name: str
    spec: QueueSpec
    parent: str | None = None
    created: str = ""  # creationTimestamp (RFC 3339: compares in time order), "" when unknown
    children: list[str] = field(default_factory=list)
    # Per-cycle figures (leaves: own pods; parents: sum of children).
    allocated: Resources = field(default_factory=Resources)
    requested: Resources = field(default_factory=Resources)  # allocated + pending demand
    allocated_np: Resources = field(default_factory=Resources)  # the part held by non-preemptible pods
    fair_share: Resources = field(default_factory=Resources)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def resource(self, name: str) -> QueueResource:
        res: QueueResource = getattr(self.spec.resources, name)
        return res


def _default_queue() -> Queue:
    # Unset resources are unlimited (quota -1), as in a Queue object without them (docs/queues.md).
    return Queue(metadata=ObjectMeta(name=DEFAULT_QUEUE), spec=QueueSpec())


class QueueTree:
    """Built fresh each cycle (queues are few); invalid links are reported and those queues skipped."""

    def __init__(self, queues: Iterable[Queue]) -> None:
        self.nodes: dict[str, QueueNode] = {}
        self.errors: list[str] = []
        self.problems: dict[str, str] = {}  # queue name -> what is wrong with it (also in `errors`)
        queues = list(queues)
        if not any(q.name == DEFAULT_QUEUE for q in queues):
            queues.append(_default_queue())  # pods without a queue label always have somewhere to go
        for q in queues:
            created = str((q.metadata.model_extra or {}).get("creationTimestamp") or "")
            self.nodes[q.name] = QueueNode(
                name=q.name, spec=q.spec, parent=q.spec.parent_queue, created=created
            )
        for node in list(self.nodes.values()):
            if node.parent is None:
                continue
            parent = self.nodes.get(node.parent)
            if parent is None:
                self._problem(node.name, f"parent queue {node.parent} does not exist")
                node.parent = None
                continue
            parent.children.append(node.name)
        self._break_cycles()
        for node in self.nodes.values():
            node.children.sort()

    def _break_cycles(self) -> None:
        for node in self.nodes.values():
            seen = {node.name}
            cur = node.parent
            while cur is not None:
                if cur in seen:
                    self._problem(node.name, f"parent chain loops through {cur}")
                    parent = self.nodes[node.parent] if node.parent else None
                    if parent and node.name in parent.children:
                        parent.children.remove(node.name)
                    node.parent = None
                    break
                seen.add(cur)
                cur = self.nodes[cur].parent

    def _problem(self, name: str, what: str) -> None:
        self.problems[name] = f"queue {name}: {what}"
        self.errors.append(self.problems[name])

    @property
    def roots(self) -> list[str]:
        return sorted(n.name for n in self.nodes.values() if n.parent is None)

    def leaf_error(self, name: str) -> str | None:
        """Why pods cannot be submitted to `name`, or None if it is a valid leaf queue."""
        node = self.nodes.get(name)
        if node is None:
            return f"queue {name} does not exist; create it or label the pod with an existing leaf queue"
        if not node.is_leaf:
            return f"queue {name} is not a leaf queue (children: {', '.join(node.children)}); use one of them"
        return None

    def ancestors(self, name: str) -> list[QueueNode]:
        """The queue itself and every parent up to the root."""
        chain = []
        cur: str | None = name
        while cur is not None:
            node = self.nodes[cur]
            chain.append(node)
            cur = node.parent
        return chain

    def roll_up(
        self,
        leaf_allocated: dict[str, Resources],
        leaf_requested: dict[str, Resources],
        leaf_allocated_np: dict[str, Resources] | None = None,
    ) -> None:
        """Set allocated/requested (and the non-preemptible part of allocated) on every queue from its leaves."""
        for node in self.nodes.values():
            node.allocated = Resources()
            node.requested = Resources()
            node.allocated_np = Resources()
        for name, res in (leaf_allocated_np or {}).items():
            for node in self.ancestors(name):
                node.allocated_np = node.allocated_np + res
        for name, res in leaf_allocated.items():
            for node in self.ancestors(name):
                node.allocated = node.allocated + res
        for name, res in leaf_requested.items():
            for node in self.ancestors(name):
                node.requested = node.requested + res

    def limit_exceeded(self, name: str, extra: Resources) -> str | None:
        """The first queue on the chain whose limit `extra` more would exceed, as a message."""
        for node in self.ancestors(name):
            for r in RESOURCE_NAMES:
                limit = node.resource(r).limit
                if limit >= 0 and node.allocated.get(r) + extra.get(r) > limit + 1e-9:
                    return (
                        f"queue {node.name} would exceed its {r} limit "
                        f"({node.allocated.get(r):g} allocated + {extra.get(r):g} requested > {limit:g})"
                    )
        return None

    def quota_exceeded(self, name: str, extra: Resources) -> str | None:
        """For non-preemptible pods: the first queue whose in-quota resources `extra` would exceed.

        Only non-preemptible pods count against it (as in KAI): preemptible pods over quota can always
        be reclaimed, so they never keep a non-preemptible pod out of its quota."""
        for node in self.ancestors(name):
            for r in RESOURCE_NAMES:
                quota = node.resource(r).quota
                used = node.allocated_np.get(r)
                if quota >= 0 and used + extra.get(r) > quota + 1e-9:
                    return (
                        f"non-preemptible pods only use in-quota resources: queue {node.name} has "
                        f"{used:g} of {quota:g} {r} quota in use by non-preemptible pods, {extra.get(r):g} more requested"
                    )
        return None
