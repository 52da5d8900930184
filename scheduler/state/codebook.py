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


class LabelBook(Codebook):
    """Codes of node labels ("key=value"), with the values of each key and their codes: a requirement on a
    key (In, NotIn, Exists, Gt...) becomes an OR over that key's columns of the label matrix."""

    def __init__(self) -> None:
        super().__init__()
        self._by_key: dict[str, list[tuple[str, int]]] = {}

    def code(self, name: str) -> int:
        new = name not in self
        found = super().code(name)
        if new:
            key, _, value = name.partition("=")
            self._by_key.setdefault(key, []).append((value, found))
        return found

    def values(self, key: str) -> list[tuple[str, int]]:
        """(value, code) of every value of `key` seen so far."""
        return self._by_key.get(key, [])


class TaintBook(Codebook):
    """Codes of taints ("key=value:Effect"), each also kept parsed."""

    def __init__(self) -> None:
        super().__init__()
        self.parsed: list[tuple[str, str, str]] = []  # (key, value, effect) by code

    def code(self, name: str) -> int:
        new = name not in self
        found = super().code(name)
        if new:
            key_value, effect = name.rsplit(":", 1)
            key, value = key_value.split("=", 1)
            self.parsed.append((key, value, effect))
        return found
