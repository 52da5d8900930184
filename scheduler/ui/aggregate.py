"""Fold nodes whose GPU map would look identical into one row, so 1,000+ nodes stay readable.

Two nodes look identical when they share pool, model, schedulability, topology domain and, GPU by GPU,
health, memory and the queue and size of every slice (which pods hold the slices does not change the
picture; the row keeps every member's name so the detail panel can still list them).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.ui.view import NodeRow

# Above this many nodes the map folds identical rows by default.
AGGREGATE_ABOVE = 200


@dataclass(frozen=True)
class NodeGroup:
    rep: NodeRow  # the first member, drawn for the whole group
    members: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.members)


def signature(node: NodeRow) -> tuple[object, ...]:
    return (
        node.pool,
        node.model,
        node.schedulable,
        node.domains,
        tuple(
            (g.healthy, g.total_mib, g.free_milli, tuple((s.queue, s.milli) for s in g.slices))
            for g in node.gpus
        ),
    )


def group_nodes(nodes: tuple[NodeRow, ...] | list[NodeRow], *, aggregate: bool) -> list[NodeGroup]:
    """One group per node, or (aggregate) one per distinct look, in order of first appearance."""
    if not aggregate:
        return [NodeGroup(n, (n.name,)) for n in nodes]
    members: dict[tuple[object, ...], list[NodeRow]] = {}
    for n in nodes:
        members.setdefault(signature(n), []).append(n)
    return [NodeGroup(rows[0], tuple(r.name for r in rows)) for rows in members.values()]
