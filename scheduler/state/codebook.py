"""Interning of strings (models, label pairs, taints) to small integer codes used by the arrays."""

from __future__ import annotations


class Codebook:
    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._names: list[str] = []

    def code(self, name: str) -> int:
        """The code of `name`, assigning the next one if new."""
        found = self._codes.get(name)
        if found is None:
            found = len(self._names)
            self._codes[name] = found
            self._names.append(name)
        return found

    def get(self, name: str) -> int | None:
        return self._codes.get(name)

    def name(self, code: int) -> str:
        return self._names[code]

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._codes
