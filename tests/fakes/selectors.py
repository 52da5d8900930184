"""Label and field selectors, parsed the way the API server parses the `labelSelector` and
`fieldSelector` query parameters."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Mapping[str, Any]], bool]


class SelectorError(ValueError):
    """The selector text is malformed; the server answers 400 BadRequest."""


_LABEL_KEY = re.compile(r"^([a-z0-9A-Z.\-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside a `(...)` value set."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    terms.append("".join(current).strip())
    if depth != 0:
        raise SelectorError(f"unbalanced parentheses in selector {text!r}")
    return [t for t in terms if t]


def _key(raw: str, text: str) -> str:
    key = raw.strip()
    if not _LABEL_KEY.match(key):
        raise SelectorError(f"invalid label key {key!r} in selector {text!r}")
    return key


LabelCheck = Callable[[Mapping[str, str]], bool]


def _label_check(key: str, op: str, values: frozenset[str]) -> LabelCheck:
    def check(labels: Mapping[str, str]) -> bool:
        present = key in labels
        value = labels.get(key)
        if op == "exists":
            return present
        if op == "!exists":
            return not present
        if op in ("=", "in"):
            return value in values
        return value not in values  # "!=" and "notin" also match a missing label, as on the server

    return check


def parse_label_selector(text: str) -> LabelCheck:
    """Return a predicate over a labels map. Supports =, ==, !=, in, notin, exists and !exists."""
    checks: list[LabelCheck] = []
    for term in _split_terms(text):
        set_match = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", term)
        if set_match:
            values = frozenset(v.strip() for v in set_match.group(3).split(",") if v.strip())
            checks.append(_label_check(_key(set_match.group(1), text), set_match.group(2), values))
            continue
        for op in ("!=", "==", "="):
            if op in term:
                raw_key, value = term.split(op, 1)
                checks.append(
                    _label_check(_key(raw_key, text), "!=" if op == "!=" else "=", frozenset({value.strip()}))
                )
                break
        else:
            if term.startswith("!"):
                checks.append(_label_check(_key(term[1:], text), "!exists", frozenset()))
            else:
                checks.append(_label_check(_key(term, text), "exists", frozenset()))
    return lambda labels: all(check(labels) for check in checks)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted field, as the server compares it ("" when absent)."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return ""
        node = node[part]
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def _field_check(field: str, value: str, negate: bool) -> Predicate:
    def check(obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, field) == value) != negate

    return check


def parse_field_selector(text: str, supported: frozenset[str]) -> Predicate:
    """Return a predicate over a whole object. Unsupported fields are an error, as on a real server."""
    checks: list[Predicate] = []
    for term in _split_terms(text):
        for op in ("!=", "==", "="):
            if op in term:
                field, value = (s.strip() for s in term.split(op, 1))
                break
        else:
            raise SelectorError(f"invalid field selector term {term!r}: expected field=value")
        if field not in supported:
            raise SelectorError(f'field label not supported: "{field}"')
        checks.append(_field_check(field, value, negate=op == "!="))
    return lambda obj: all(check(obj) for check in checks)
