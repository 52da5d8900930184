"""Replay allocation curves: the schema `tessera replay` hands to the report, and a reader for the FGD
paper's published curves (a CSV the user points at; it is never copied into the project)."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator


class CurvePoint(BaseModel):
    arrived_pct: float = Field(ge=0)
    allocated_pct: float = Field(ge=0, le=100.5)  # rounding may put a full cluster a hair above 100

    @field_validator("arrived_pct", "allocated_pct")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v


class ReplayCurve(BaseModel):
    """One policy's run: GPU allocation % of capacity against arrived GPU demand % of capacity."""

    policy: str = Field(min_length=1)
    curve: list[CurvePoint]
    unallocated_pct_at_100: float | None = None

    def at(self, arrived_pct: float) -> float | None:
        """Allocation at the point nearest `arrived_pct` (within one bin), else None."""
        best = min(self.curve, key=lambda p: abs(p.arrived_pct - arrived_pct), default=None)
        return best.allocated_pct if best is not None and abs(best.arrived_pct - arrived_pct) <= 1 else None

    def unallocated_at_100(self) -> float | None:
        if self.unallocated_pct_at_100 is not None:
            return self.unallocated_pct_at_100
        alloc = self.at(100)
        return None if alloc is None else 100 - alloc


def parse_curves(raw: Iterable[Mapping[str, Any]]) -> tuple[list[ReplayCurve], list[str]]:
    """Validated curves (points sorted by arrived %), and one line per entry that had to be skipped."""
    curves: list[ReplayCurve] = []
    errors: list[str] = []
    for i, item in enumerate(raw):
        try:
            c = ReplayCurve.model_validate(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            name = item.get("policy", f"#{i}") if isinstance(item, Mapping) else f"#{i}"
            errors.append(f"curve {name}: {where}: {first['msg']}")
            continue
        c.curve.sort(key=lambda p: p.arrived_pct)
        curves.append(c)
    return curves, errors


# The paper's names for policies whose Tessera name differs.
_PAPER_NAMES = {"gpupacking": "packing"}


def policy_key(name: str) -> str:
    """`06-FGD` and `fgd` name the same policy: drop the paper's ordering prefix and the case."""
    key = re.sub(r"^\d+-", "", name.strip()).lower()
    return _PAPER_NAMES.get(key, key)


def load_reference_curves(path: str | Path) -> tuple[list[ReplayCurve], list[str]]:
    """The published curves (workload,sc_policy,tune,seed,total_gpus,0,1,...,130): mean over seeds."""
    sums: dict[str, list[list[float]]] = {}
    errors: list[str] = []
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or len(header) < 6 or header[1] != "sc_policy":
            return [], [f"{path}: not an allocation-curves CSV (expected a sc_policy column)"]
        bins = [float(h) for h in header[5:]]
        for line_no, row in enumerate(reader, start=2):
            if len(row) != len(header):
                errors.append(f"{path}:{line_no}: {len(row)} fields, expected {len(header)}")
                continue
            try:
                values = [float(v) for v in row[5:]]
            except ValueError:
                errors.append(f"{path}:{line_no}: a value is not a number")
                continue
            sums.setdefault(row[1], []).append(values)
    curves = []
    for policy, runs in sums.items():
        mean = [sum(col) / len(col) for col in zip(*runs, strict=True)]
        points = [
            CurvePoint(arrived_pct=b, allocated_pct=min(v, 100.0)) for b, v in zip(bins, mean, strict=True)
        ]
        curves.append(ReplayCurve(policy=policy, curve=points))
    return curves, errors
