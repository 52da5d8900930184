"""The three patch formats the API server accepts from the Python client.

- JSON merge patch (RFC 7386): maps merge, `null` deletes, lists replace.
- Strategic merge patch (built-in types only): like a merge patch, but lists the Kubernetes API marks with a
  patch merge key (containers by name, conditions by type, ...) merge item by item, and `$patch: delete`
  removes an item. Lists without a known merge key are replaced, as the real server does.
- JSON patch (RFC 6902): add, remove, replace, move, copy, test.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """The patch cannot be applied; the server answers 422 (or 400 for malformed patches)."""


# Field name -> merge key for the lists that strategic merge patch merges item by item.
STRATEGIC_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "containerStatuses": "name",
    "addresses": "type",
}
# Lists of scalars merged as sets.
STRATEGIC_SET_LISTS = frozenset({"finalizers"})


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in STRATEGIC_MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_keyed_list(result[key], value, STRATEGIC_MERGE_KEYS[key])
        elif isinstance(value, list) and key in STRATEGIC_SET_LISTS and isinstance(result.get(key), list):
            result[key] = list(dict.fromkeys([*result[key], *value]))
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _merge_keyed_list(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    merged = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"strategic merge patch: list item lacks merge key {merge_key!r}: {item!r}")
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                merged.pop(index)
        elif index is None:
            merged.append(strategic_merge_patch({}, item))
        else:
            merged[index] = strategic_merge_patch(merged[index], item)
    return merged


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _walk(doc: Any, pointer: str) -> tuple[Any, str]:
    """Return (parent container, last token) for a JSON pointer."""
    if not pointer.startswith("/"):
        raise PatchError(f"JSON pointer {pointer!r} must start with '/'")
    tokens = [_unescape(t) for t in pointer[1:].split("/")]
    node = doc
    for token in tokens[:-1]:
        node = _child(node, token, pointer)
    return node, tokens[-1]


def _child(node: Any, token: str, pointer: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise PatchError(f"JSON patch path {pointer!r} does not exist")
        return node[token]
    if isinstance(node, list):
        try:
            return node[int(token)]
        except (ValueError, IndexError):
            raise PatchError(f"JSON patch path {pointer!r} does not exist") from None
    raise PatchError(f"JSON patch path {pointer!r} does not exist")


def _get(doc: Any, pointer: str) -> Any:
    if pointer == "":
        return doc
    parent, token = _walk(doc, pointer)
    return _child(parent, token, pointer)


def _add(doc: Any, pointer: str, value: Any) -> Any:
    if pointer == "":
        return copy.deepcopy(value)
    parent, token = _walk(doc, pointer)
    if isinstance(parent, dict):
        parent[token] = copy.deepcopy(value)
    elif isinstance(parent, list):
        index = len(parent) if token == "-" else _index(token, len(parent) + 1, pointer)
        parent.insert(index, copy.deepcopy(value))
    else:
        raise PatchError(f"JSON patch path {pointer!r} does not exist")
    return doc


def _remove(doc: Any, pointer: str) -> Any:
    parent, token = _walk(doc, pointer)
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"JSON patch remove: path {pointer!r} does not exist")
        del parent[token]
    elif isinstance(parent, list):
        parent.pop(_index(token, len(parent), pointer))
    else:
        raise PatchError(f"JSON patch remove: path {pointer!r} does not exist")
    return doc


def _index(token: str, bound: int, pointer: str) -> int:
    try:
        index = int(token)
    except ValueError:
        raise PatchError(f"JSON patch path {pointer!r}: {token!r} is not an array index") from None
    if not 0 <= index < bound:
        raise PatchError(f"JSON patch path {pointer!r}: index {index} out of range")
    return index


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, op.get("value"))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = _add(_remove(doc, path), path, op.get("value")) if path else copy.deepcopy(op.get("value"))
        elif kind == "move":
            value = _get(doc, op["from"])
            doc = _add(_remove(doc, op["from"]), path, value)
        elif kind == "copy":
            doc = _add(doc, path, _get(doc, op["from"]))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"JSON patch test failed at {path!r}")
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return doc
