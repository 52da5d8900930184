"""A bounded log of what could not be used (invalid objects, pods that cannot be accounted), for people.

A long-running scheduler sees bad input forever; only the latest messages are kept, and how many there
were in all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

DEFAULT_KEEP = 200


class ErrorLog:
    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self._latest: deque[str] = deque(maxlen=keep)
        self.total = 0

    def add(self, message: str) -> None:
        self._latest.append(message)
        self.total += 1

    def latest(self, n: int | None = None) -> list[str]:
        """The latest `n` messages (all kept ones by default), oldest first."""
        items = list(self._latest)
        return items if n is None else items[-n:] if n > 0 else []

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._latest))

    def __len__(self) -> int:
        return len(self._latest)


class Problems:
    """What is wrong now with objects the scheduler cannot use as written, by kind and name (a node that
    takes no pod, a queue or pod group that is invalid): one line each, gone once the object is fixed or
    deleted. Unlike the `ErrorLog` (history), this is the present: warnings and status are made from it."""

    def __init__(self) -> None:
        self.nodes: dict[str, str] = {}  # node name
        self.queues: dict[str, str] = {}  # queue name
        self.podgroups: dict[str, str] = {}  # namespace/name

    def __len__(self) -> int:
        return len(self.nodes) + len(self.queues) + len(self.podgroups)
