"""kube-scheduler's node filters as array expressions over the state's label, taint and port columns.

Every node at once, one requirement at a time: a node's labels are the columns of `label_matrix` (one per
"key=value"), and the state's `LabelBook` lists the columns of each key, so `In` is an OR over the
columns of the values named, `Exists` an OR over all of the key's columns, `Gt`/`Lt` an OR over the
columns whose value parses as an integer on the right side. A term is an AND of its requirements, the
required affinity an OR of its terms (scheduler/model/selectors.py has the rules). `matchFields` on
`metadata.name` compares the row with the named node's. Taints are columns too (NoSchedule and NoExecute
filter; PreferNoSchedule is scored), and host ports (`port_use`: pods per node binding each
"protocol/port/hostIP").

Every function takes the rows it is given (a whole `ClusterState` or a `RowView`) and answers per row, so
the incremental placer re-runs them on the rows that changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scheduler.model.constraints import ANY_IP, split_port
from scheduler.model.selectors import NODE_NAME_FIELD, NodeSelectorTerm, Requirement, go_int
from scheduler.model.types import Taint, Toleration
from scheduler.state.node_arrays import NodeArrays

Array = Any

FILTERED_EFFECTS = ("NoSchedule", "NoExecute")
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def _any_column(state: NodeArrays, cols: list[int]) -> Array:
    xp = state.xp
    out = xp.zeros(state.valid.shape, dtype=xp.bool)
    width = state.label_matrix.shape[1]
    for c in cols:
        if c < width:
            out = out | state.label_matrix[:, c]
    return out


def requirement_mask(state: NodeArrays, r: Requirement) -> Array:
    """bool[N]: nodes whose labels satisfy `r`."""
    values = state.labels.values(r.key)
    op = r.operator
    if op in ("In", "NotIn"):
        wanted = set(r.values)
        hit = _any_column(state, [c for v, c in values if v in wanted])
        return hit if op == "In" else ~hit
    if op in ("Exists", "DoesNotExist"):
        has = _any_column(state, [c for _, c in values])
        return has if op == "Exists" else ~has
    if op in ("Gt", "Lt") and len(r.values) == 1 and (bound := go_int(r.values[0])) is not None:
        cols = []
        for v, c in values:
            have = go_int(v)
            if have is not None and (have > bound if op == "Gt" else have < bound):
                cols.append(c)
        return _any_column(state, cols)
    return state.xp.zeros(state.valid.shape, dtype=state.xp.bool)


def _field_mask(state: NodeArrays, r: Requirement) -> Array:
    xp = state.xp
    row = state.row_of(r.values[0]) if r.key == NODE_NAME_FIELD and len(r.values) == 1 else None
    hit = xp.zeros(state.valid.shape, dtype=xp.bool) if row is None else state.row_id == row
    return hit if r.operator == "In" else ~hit


def term_mask(state: NodeArrays, term: NodeSelectorTerm) -> Array:
    """bool[N]: nodes matching one node selector term (the AND of its requirements)."""
    xp = state.xp
    ok = xp.full(state.valid.shape, term.valid, dtype=xp.bool)
    if not term.valid:
        return ok
    for r in term.expressions:
        ok = ok & requirement_mask(state, r)
    for r in term.fields:
        ok = ok & _field_mask(state, r)
    return ok


def terms_mask(state: NodeArrays, terms: Iterable[NodeSelectorTerm]) -> Array:
    """bool[N]: nodes matching any of the terms (none: no node)."""
    xp = state.xp
    ok = xp.zeros(state.valid.shape, dtype=xp.bool)
    for term in terms:
        ok = ok | term_mask(state, term)
    return ok


def untolerated(state: NodeArrays, tolerations: tuple[Toleration, ...], effects: tuple[str, ...]) -> Array:
    """bool[N]: nodes with a taint of one of `effects` that no toleration tolerates."""
    xp = state.xp
    bad = xp.zeros(state.valid.shape, dtype=xp.bool)
    width = state.taint_matrix.shape[1]
    for col, (key, value, effect) in enumerate(state.taints.parsed[:width]):
        if effect in effects and not any(t.tolerates(Taint(key, value, effect)) for t in tolerations):
            bad = bad | state.taint_matrix[:, col]
    return bad


def untolerated_count(state: NodeArrays, tolerations: tuple[Toleration, ...], effect: str) -> Array:
    """int64[N]: how many taints of `effect` each node has that no toleration tolerates."""
    xp = state.xp
    n = xp.zeros(state.valid.shape, dtype=xp.int64)
    width = state.taint_matrix.shape[1]
    for col, (key, value, eff) in enumerate(state.taints.parsed[:width]):
        if eff == effect and not any(t.tolerates(Taint(key, value, eff)) for t in tolerations):
            n = n + xp.astype(state.taint_matrix[:, col], xp.int64)
    return n


def schedulable(state: NodeArrays, tolerations: tuple[Toleration, ...]) -> Array:
    """bool[N]: live nodes the pod may use: not cordoned, or cordoned and the pod tolerates it
    (kube-scheduler's NodeUnschedulable)."""
    if any(t.tolerates(UNSCHEDULABLE_TAINT) for t in tolerations):
        return state.valid | state.cordoned
    return state.valid


def ports_free(state: NodeArrays, ports: tuple[str, ...]) -> Array:
    """bool[N]: nodes where none of `ports` is bound (kube-scheduler's NodePorts: a port on 0.0.0.0
    conflicts with that protocol and port on any address; one on an address, with it and with 0.0.0.0)."""
    xp = state.xp
    ok = xp.ones(state.valid.shape, dtype=xp.bool)
    width = state.port_use.shape[1]
    for code in ports:
        protocol, port, ip = split_port(code)
        for col in range(min(len(state.ports), width)):
            p2, port2, ip2 = split_port(state.ports.name(col))
            if (p2, port2) != (protocol, port):
                continue
            if ip == ANY_IP or ip2 in (ANY_IP, ip):
                ok = ok & (state.port_use[:, col] == 0)
    return ok
