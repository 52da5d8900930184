"""Objects promised never to be written again, and what is worked out from them, kept by identity.

The pod watch keeps the parts the pods of one controller have alike once (`kube/shared_values.py`): the
same containers, tolerations and labels objects in 150,000 pods of a relist. What the parser works out of
them (the pod's resources, its tolerations, its labels checked) is the same for every pod holding the same
object, so it is worked out once, found by the object's identity. Identity is only a key for an object that
cannot change: `freeze` is the promise (made by the pod watch for what it shares, which nothing writes
into), and a memo keeps a reference to each object it has a result for, so an identity it holds is never
another object's.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")

_FROZEN: dict[int, object] = {}


def freeze(obj: object) -> None:
    """`obj` will not be written again (until `thaw`)."""
    _FROZEN[id(obj)] = obj


def thaw(obj: object) -> None:
    """`obj` is no longer promised (its holder is dropping it)."""
    if _FROZEN.get(id(obj)) is obj:
        del _FROZEN[id(obj)]


def is_frozen(obj: object) -> bool:
    return _FROZEN.get(id(obj)) is obj


class ByIdentity(Generic[T]):
    """Results worked out of frozen objects, by identity; bounded (cleared when full)."""

    def __init__(self, limit: int = 4096) -> None:
        self._memo: dict[int, tuple[Any, T]] = {}
        self._limit = limit

    def get(self, obj: object) -> T | None:
        found = self._memo.get(id(obj))
        return found[1] if found is not None and found[0] is obj else None

    def put(self, obj: object, result: T) -> T:
        """Keep `result` for `obj` when `obj` is frozen; `result` either way."""
        if _FROZEN.get(id(obj)) is obj:
            if len(self._memo) >= self._limit:
                self._memo.clear()
            self._memo[id(obj)] = (obj, result)
        return result
