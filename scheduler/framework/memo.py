"""What the actions compute once per cycle and share: typed keys into the session's memo.

A key is declared next to the code that fills it (`MemoKey[list[Victim]]("victims")`), so a reader of
the memo gets the type its writer stored, and the session need not know any action's types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


class MemoKey(Generic[T]):
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"MemoKey({self.name!r})"


class Memo:
    """Per-cycle results (valid while nothing the key depends on changes; each key says what that is)."""

    def __init__(self) -> None:
        self._values: dict[MemoKey[Any], Any] = {}

    def get(self, key: MemoKey[T], make: Callable[[], T]) -> T:
        """The value under `key`, made (and kept) on first use."""
        if key not in self._values:
            self._values[key] = make()
        return cast(T, self._values[key])

    def peek(self, key: MemoKey[T]) -> T | None:
        return cast("T | None", self._values.get(key))

    def put(self, key: MemoKey[T], value: T) -> None:
        self._values[key] = value
