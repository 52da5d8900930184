"""Label selectors and node selector terms, with Kubernetes' matching rules (apimachinery's `labels`).

- A requirement: `In` (the label is there with one of the values), `NotIn` (absent, or none of them),
  `Exists`, `DoesNotExist`, and, for nodes, `Gt`/`Lt` (the label and the value both parse as Go's int64,
  and compare so).
- A `LabelSelector` is the AND of its `matchLabels` (each an `In` of one value) and `matchExpressions`;
  an empty one matches everything, an absent one (None where it is optional) nothing.
- A `NodeSelectorTerm` is the AND of its `matchExpressions` (on labels) and `matchFields` (only
  `metadata.name`, `In`/`NotIn` of one value); a term with neither matches no node, and a node's required
  affinity is the OR of its terms (component-helpers' nodeaffinity). A term Kubernetes could not parse (an
  unknown operator, `Gt` of a non-integer) matches nothing, as there.

Matching one object's labels is here (pods against pods' selectors); matching every node at once is an
array program over the state's label columns (`scheduler/placement/node_rules.py`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
NODE_OPERATORS = LABEL_OPERATORS | {"Gt", "Lt"}
NODE_NAME_FIELD = "metadata.name"
_GO_INT = re.compile(r"[+-]?[0-9]{1,19}", re.ASCII)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class InvalidSelector(ValueError):
    """A selector Kubernetes refuses; the message is one line."""


def go_int(text: str) -> int | None:
    """`text` as Go's strconv.ParseInt(text, 10, 64) reads it; None where that fails."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else None


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op in ("Gt", "Lt") and value is not None and len(self.values) == 1:
            have, bound = go_int(value), go_int(self.values[0])
            if have is None or bound is None:
                return False
            return have > bound if op == "Gt" else have < bound
        return False


@dataclass(frozen=True)
class LabelSelector:
    """The AND of its requirements; no requirement matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def with_requirements(self, more: tuple[Requirement, ...]) -> LabelSelector:
        return LabelSelector(self.requirements + more) if more else self


EVERYTHING = LabelSelector()


@dataclass(frozen=True)
class NodeSelectorTerm:
    expressions: tuple[Requirement, ...] = ()  # on the node's labels
    fields: tuple[Requirement, ...] = ()  # on metadata.name
    valid: bool = True  # False: Kubernetes cannot parse it, it matches no node

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.valid:
            return False
        fields = {NODE_NAME_FIELD: name}
        return all(r.matches(labels) for r in self.expressions) and all(
            r.matches(fields) for r in self.fields
        )


def _strings(raw: object, what: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidSelector(f"{what} must be a list of strings")
    return tuple(str(v) for v in raw)


def as_map(raw: object, what: str) -> Mapping[str, Any]:
    """`raw` as a map (absent: empty); InvalidSelector naming `what` otherwise."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidSelector(f"{what} must be a map")
    return raw


def as_list(raw: object, what: str) -> list[Any]:
    """`raw` as a list (absent: empty); InvalidSelector naming `what` otherwise."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidSelector(f"{what} must be a list")
    return raw


def _label_requirement(raw: object, what: str) -> Requirement:
    expr = as_map(raw, what)
    op = str(expr.get("operator") or "")
    values = _strings(expr.get("values"), f"{what}.values")
    if op not in LABEL_OPERATORS:
        raise InvalidSelector(f"{what}: {op!r} is not a valid label selector operator")
    if op in ("In", "NotIn") and not values:
        raise InvalidSelector(f"{what}: values must not be empty for {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise InvalidSelector(f"{what}: values must be empty for {op}")
    return Requirement(str(expr.get("key") or ""), op, values)


def parse_label_selector(raw: object, what: str) -> LabelSelector | None:
    """A metav1.LabelSelector; None when absent (it then selects nothing, where that matters).
    InvalidSelector for what the API server refuses."""
    if raw is None:
        return None
    sel = as_map(raw, what)
    reqs = [
        Requirement(str(k), "In", (str(v),)) for k, v in sorted(as_map(sel.get("matchLabels"), what).items())
    ]
    reqs += [
        _label_requirement(e, f"{what}.matchExpressions[{i}]")
        for i, e in enumerate(as_list(sel.get("matchExpressions"), f"{what}.matchExpressions"))
    ]
    return LabelSelector(tuple(reqs))


def _node_requirement(raw: object, *, field: bool) -> Requirement | None:
    """One requirement of a node selector term; None where Kubernetes could not parse it."""
    expr = as_map(raw, "requirement")
    op = str(expr.get("operator") or "")
    values = _strings(expr.get("values"), "values")
    key = str(expr.get("key") or "")
    if field:
        ok = key == NODE_NAME_FIELD and op in ("In", "NotIn") and len(values) == 1
    elif op in ("In", "NotIn"):
        ok = bool(values)
    elif op in ("Exists", "DoesNotExist"):
        ok = not values
    elif op in ("Gt", "Lt"):
        ok = len(values) == 1 and go_int(values[0]) is not None
    else:
        ok = False
    return Requirement(key, op, values) if ok else None


def parse_node_selector_term(raw: object, what: str) -> NodeSelectorTerm | None:
    """A NodeSelectorTerm; None for an empty one (it selects nothing and is left out)."""
    term = as_map(raw, what)
    exprs = as_list(term.get("matchExpressions"), f"{what}.matchExpressions")
    fields = as_list(term.get("matchFields"), f"{what}.matchFields")
    if not exprs and not fields:
        return None
    e = tuple(_node_requirement(x, field=False) for x in exprs)
    f = tuple(_node_requirement(x, field=True) for x in fields)
    if any(r is None for r in (*e, *f)):
        return NodeSelectorTerm(valid=False)
    return NodeSelectorTerm(tuple(r for r in e if r is not None), tuple(r for r in f if r is not None))
