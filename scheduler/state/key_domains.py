"""Topology domains by node label key, as integer codes per row: what inter-pod affinity, anti-affinity and
topology spread count pods over.

For a key (`topology.kubernetes.io/zone`, `kubernetes.io/hostname`, any label), a node's code is the index
of its value in that key's codebook, -1 where it has no such label. Codes are kept for the keys some pod
has asked about (`codes` registers a key on first use, from every node's labels) and updated as nodes are
written, so a cycle never recomputes them: per-domain figures are a segment sum over `codes`
(`scheduler/placement/interpod.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.state.backend import ArrayNamespace
from scheduler.state.codebook import Codebook

Array = Any


class KeyDomains:
    def __init__(self, xp: ArrayNamespace, capacity: int) -> None:
        self.xp = xp
        self.capacity = capacity
        self.books: dict[str, Codebook] = {}  # key -> its values' codes
        self.codes_by_key: dict[str, Array] = {}  # key -> int32[C] (-1: no such label)
        self.host_codes: dict[str, list[int]] = {}  # the same on the host, for per-pod lookups by row
        self._members: dict[str, dict[int, set[int]]] = {}  # key -> domain code -> its rows

    def codes(self, key: str, labels_by_row: list[Mapping[str, str] | None]) -> Array:
        """int32[C]: each row's domain code for `key` (registered now if new, from `labels_by_row`)."""
        found = self.codes_by_key.get(key)
        if found is not None:
            return found
        book = self.books[key] = Codebook()
        values = [
            book.code(v) if labels is not None and (v := labels.get(key)) is not None else -1
            for labels in labels_by_row
        ]
        values += [-1] * (self.capacity - len(values))
        arr = self.xp.asarray(values, dtype=self.xp.int32)
        self.codes_by_key[key] = arr
        self.host_codes[key] = values
        members: dict[int, set[int]] = {}
        for row, code in enumerate(values):
            if code >= 0:
                members.setdefault(code, set()).add(row)
        self._members[key] = members
        return arr

    def members(self, key: str, domains: list[int], limit: int = 256) -> list[int] | None:
        """The rows of `domains` of a registered key, if there are at most `limit` (else None: a lookup
        table over the codes is cheaper)."""
        members = self._members[key]
        rows: list[int] = []
        for code in domains:
            rows.extend(members.get(code, ()))
            if len(rows) > limit:
                return None
        return rows

    def host(self, key: str, labels_by_row: list[Mapping[str, str] | None]) -> list[int]:
        """`codes` as a host list (registers the key if new)."""
        if key not in self.host_codes:
            self.codes(key, labels_by_row)
        return self.host_codes[key]

    def size(self, key: str) -> int:
        """Domains of `key` seen so far (codes are below this)."""
        return len(self.books[key])

    def name(self, key: str, code: int) -> str:
        return self.books[key].name(code)

    def write_row(self, row: int, labels: Mapping[str, str] | None) -> None:
        """A node was written to `row` (None: removed): its codes for every registered key."""
        for key, arr in self.codes_by_key.items():
            value = labels.get(key) if labels is not None else None
            code = self.books[key].code(value) if value is not None else -1
            old = self.host_codes[key][row]
            if old != code:
                if old >= 0:
                    self._members[key][old].discard(row)
                if code >= 0:
                    self._members[key].setdefault(code, set()).add(row)
            arr[row] = code
            self.host_codes[key][row] = code

    def grow(self, capacity: int) -> None:
        xp = self.xp
        for key, arr in self.codes_by_key.items():
            pad = xp.full((capacity - self.capacity,), -1, dtype=xp.int32)
            self.codes_by_key[key] = xp.concat([arr, pad])
            self.host_codes[key].extend([-1] * (capacity - self.capacity))

        self.capacity = capacity
