"""Objects never written again: records frozen for the type checker, and parts promised frozen whose
readings are kept by identity.

Records (`frozen_for_the_checker`): the scheduler's per-pod records (a `PodInfo`, its `Placement`, the
ledger's `Holding`, a `Job`...) are immutable: a change is a new record (`dataclasses.replace`). mypy
enforces it; at run time a write is not trapped, because a frozen dataclass's `__init__` sets each field
through `object.__setattr__`: building a `PodInfo` (27 fields) cost four times as much, and a restart
builds some 150,000 of each of them.

Parts promised frozen: the pod watch keeps the parts the pods of one controller have alike once
(`kube/shared_values.py`): the same containers, tolerations and labels objects in 150,000 pods of a
relist. What the parser works out of them (the pod's resources, its tolerations, its labels checked) is the
same for every pod holding the same object, so it is worked out once, found by the object's identity.
Identity is only a key for an object that cannot change: `freeze` is the promise (made by the pod watch for
what it shares, which nothing writes into), and a memo keeps a reference to each object it has a result
for, so an identity it holds is never another object's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen_for_the_checker(cls: type[T]) -> type[T]:
    """A slotted dataclass, frozen to the type checker (mypy refuses every write to one), hashed by its
    fields as a frozen one is (unless it says how), whose writes are not trapped at run time (above)."""
    return dataclass(slots=True, unsafe_hash="__hash__" not in cls.__dict__)(cls)


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
