"""The FGD paper's published allocation curves (`fgd_allocation_curves.csv`), averaged per policy."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

from scheduler.replay.curve import Curve, mean_curve
from scheduler.replay.trace import TraceError


def load_reference(path: str | Path) -> dict[str, Curve]:
    """Policy label (e.g. "FGD", from "06-FGD") -> mean curve over the file's seeds."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such file")
    per_policy: dict[str, list[Curve]] = defaultdict(list)
    try:
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            bins = sorted(int(c) for c in header if c.isdigit())
            if "sc_policy" not in header or not bins:
                raise TraceError(f"{p}: expected columns sc_policy and 0..130")
            for line, row in enumerate(reader, start=2):
                label = row["sc_policy"].split("-", 1)[-1]
                try:
                    values = tuple(float(row[str(b)]) for b in bins)
                except (TypeError, ValueError):
                    raise TraceError(f"{p}:{line}: non-numeric allocation value") from None
                per_policy[label].append(Curve(values))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{p}: cannot read: {exc}") from exc
    return {k: mean_curve(v) for k, v in per_policy.items()}


def load_reference_table(path: str | Path, arrived_pct: int = 100) -> dict[str, dict[str, float]]:
    """Workload (e.g. "openb_pod_list_gpuspec33") -> paper label -> mean unallocated % at `arrived_pct`,
    from a per-workload curve file (the simulator's `experiments/analysis/expected_results/
    analysis_allo_discrete.csv`, which holds the published runs of every workload; the shared
    `fgd_allocation_curves.csv` has the default workload's rows only)."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such file")
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    try:
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            col = str(arrived_pct)
            if "sc_policy" not in header or "workload" not in header or col not in header:
                raise TraceError(f"{p}: expected columns workload, sc_policy and {col}")
            for line, row in enumerate(reader, start=2):
                label = row["sc_policy"].split("-", 1)[-1]
                try:
                    values[row["workload"].strip()][label].append(100.0 - float(row[col]))
                except (TypeError, ValueError):
                    raise TraceError(f"{p}:{line}: non-numeric allocation value") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{p}: cannot read: {exc}") from exc
    return {w: {k: sum(v) / len(v) for k, v in by.items()} for w, by in values.items()}
