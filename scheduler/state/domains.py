"""Topology domains of the nodes, as the integer codes kept in `ClusterState.domain`.

Every level of every Topology is one column of `domain` (int32[R, columns]). A node's code in a column
stands for its domain at that level: the path of its label values from the outermost level down to that
one (`zone-a/block-1/rack-3`), so two racks named alike under different blocks are different domains. A
node lacking any of its topology's labels is outside that topology: -1 in all of its columns (KAI
Scheduler and Kueue treat such nodes the same way). Codes are dense per column, so the kernels can sum
per-node figures into per-domain ones with a segment sum of `len(book)` cells
(`scheduler/placement/topology.py`).

Topologies change rarely: any change rebuilds the columns from the nodes' labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.state.codebook import Codebook

SEPARATOR = "/"  # never in a label value


class DomainColumns:
    def __init__(self) -> None:
        self.levels: dict[str, tuple[str, ...]] = {}  # topology name -> label keys, outermost first
        self.column: dict[tuple[str, int], int] = {}  # (topology, level index) -> column of `domain`
        self.books: list[Codebook] = []  # per column: domain path -> code
        self._ranks: dict[int, tuple[int, list[int]]] = {}  # column -> (book size, rank of each code)
        # What the placement derives from the columns, kept until they change (e.g. each topology's node
        # order by domain path), keyed by the caller; cleared with the columns.
        self.derived: dict[Any, Any] = {}

    @property
    def width(self) -> int:
        return len(self.books)

    def configure(self, topologies: Mapping[str, Sequence[str]]) -> bool:
        """Use these topologies (name -> label keys); whether anything changed (then every column is
        new and the caller recomputes every row)."""
        wanted = {name: tuple(keys) for name, keys in sorted(topologies.items())}
        if wanted == self.levels:
            return False
        self.levels = wanted
        self.column = {}
        self.books = []
        self._ranks = {}
        self.derived = {}
        for name, keys in wanted.items():
            for i in range(len(keys)):
                self.column[(name, i)] = len(self.books)
                self.books.append(Codebook())
        return True

    def codes(self, labels: Mapping[str, str]) -> list[int]:
        """One code per column for a node with these labels (-1: outside that topology)."""
        out = [-1] * self.width
        for name, keys in self.levels.items():
            values = [labels.get(k) for k in keys]
            if any(v is None for v in values):
                continue
            path = ""
            for i, value in enumerate(values):
                path = f"{path}{SEPARATOR}{value}" if i else str(value)
                out[self.column[(name, i)]] = self.books[self.column[(name, i)]].code(path)
        return out

    def size(self, column: int) -> int:
        """Codes in use in `column` (a segment sum over it needs this many cells)."""
        return len(self.books[column])

    def name(self, column: int, code: int) -> str:
        return self.books[column].name(code)

    def ranks(self, column: int) -> list[int]:
        """The rank of each code's path in name order: ties between domains are broken by name, as
        KAI Scheduler breaks them by domain ID (so the order never depends on when a node was added)."""
        book = self.books[column]
        cached = self._ranks.get(column)
        if cached is not None and cached[0] == len(book):
            return cached[1]
        order = sorted(range(len(book)), key=book.name)
        rank = [0] * len(book)
        for r, code in enumerate(order):
            rank[code] = r
        self._ranks[column] = (len(book), rank)
        return rank
