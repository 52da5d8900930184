"""The queue tree built from `Queue` objects: parents, leaves, ancestors, per-queue usage.

Every walk of the tree is a loop bounded by its depth, at most `MAX_QUEUE_DEPTH` levels (docs/limits.md):
a queue deeper than that is left out of the tree as invalid (`invalid`), with its descendants; its pods
wait, told why, and the cycle goes on for everyone else. Which namespaces may use a queue is its
`spec.namespaces` and its ancestors' (`namespace_problem`, docs/tenancy.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler.api.keys import DEFAULT_QUEUE
from scheduler.api.limits import MAX_QUEUE_DEPTH
from scheduler.api.meta import ObjectMeta
from scheduler.api.queue import Queue, QueueResource, QueueSpec
from scheduler.api.tenancy import namespace_problem
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
        # Queues left out of the tree (too deep): name -> why; their pods are told (`leaf_error`).
        self.invalid: dict[str, str] = {}
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
        self._bound_depth()
        for node in self.nodes.values():
            node.children.sort()

    def _break_cycles(self) -> None:
        for node in self.nodes.values():
            seen = {node.name}
            cur = node.parent
            while cur is not None and len(seen) <= MAX_QUEUE_DEPTH:  # deeper: `_bound_depth` says so
                if cur in seen:
                    self._problem(node.name, f"parent chain loops through {cur}")
                    parent = self.nodes[node.parent] if node.parent else None
                    if parent and node.name in parent.children:
                        parent.children.remove(node.name)
                    node.parent = None
                    break
                seen.add(cur)
                cur = self.nodes[cur].parent

    def _bound_depth(self) -> None:
        """Leave out every queue more than MAX_QUEUE_DEPTH levels deep, with its descendants (walked level
        by level from the top, each queue once; a queue never reached hangs below a loop of parents longer
        than `_break_cycles` follows)."""
        depth: dict[str, int] = {name: 1 for name in self.roots}
        level = list(depth)
        while level:
            below = []
            for name in level:
                for child in self.nodes[name].children:
                    depth[child] = depth[name] + 1
                    below.append(child)
            level = below
        too_deep = [n for n in self.nodes if n not in depth or depth[n] > MAX_QUEUE_DEPTH]
        for name in too_deep:
            node = self.nodes[name]
            self.invalid[name] = (
                f"queue {name} is {depth[name]} levels deep, more than the {MAX_QUEUE_DEPTH} a queue tree may "
                "have (docs/limits.md): it is left out, and its pods wait until the tree is made shallower"
                if name in depth
                else f"queue {name} hangs below a chain of parents that loops: it is left out, and its pods "
                "wait until the tree is fixed"
            )
            self.errors.append(self.invalid[name])
            parent = self.nodes.get(node.parent) if node.parent else None
            if parent is not None and name in parent.children:
                parent.children.remove(name)
        for name in too_deep:
            del self.nodes[name]

    def _problem(self, name: str, what: str) -> None:
        self.problems[name] = f"queue {name}: {what}"
        self.errors.append(self.problems[name])

    @property
    def roots(self) -> list[str]:
        return sorted(n.name for n in self.nodes.values() if n.parent is None)

    def walk(self) -> list[tuple[str, int]]:
        """Every queue with its depth (0 at the top), each parent right before its subtree, in name order."""
        out: list[tuple[str, int]] = []
        stack = [(name, 0) for name in reversed(self.roots)]
        while stack:
            name, depth = stack.pop()
            out.append((name, depth))
            stack.extend((child, depth + 1) for child in reversed(self.nodes[name].children))
        return out

    def leaf_error(self, name: str, namespace: str | None = None) -> str | None:
        """Why pods (of `namespace`, when given) cannot be submitted to `name`, or None if it is a valid leaf
        queue open to them."""
        if name in self.invalid:
            return self.invalid[name]
        node = self.nodes.get(name)
        if node is None:
            return f"queue {name} does not exist; create it or label the pod with an existing leaf queue"
        if not node.is_leaf:
            return f"queue {name} is not a leaf queue (children: {', '.join(node.children)}); use one of them"
        return self.namespace_problem(name, namespace) if namespace is not None else None

    def namespace_problem(self, name: str, namespace: str) -> str | None:
        """Why `namespace` may not use queue `name` (None: it may): the queue, or one of its ancestors, names
        the namespaces that may use it (`spec.namespaces`) and this one is not among them."""
        return namespace_problem(name, namespace, [(n.name, n.spec.namespaces) for n in self.ancestors(name)])

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

    def limit_exceeded(self, name: str, extra: Resources, *, only_self: bool = False) -> str | None:
        """The first queue on the chain whose limit `extra` more would exceed, as a message (`only_self`:
        queue `name`'s own limit only)."""
        for node in self.ancestors(name)[:1] if only_self else self.ancestors(name):
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
