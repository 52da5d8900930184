"""Loader for the Alibaba openb trace format (node list and pod list CSVs).

Every row is validated by a pydantic model; a bad row becomes a `RowError` (line, column, value, why)
and is skipped, the rest loads. A missing file, a missing required column or no usable row is a
`TraceError`.

Pod lists of `cluster-trace-gpu-v2023/csv/` differ in columns: the `multigpu*` lists have only
`name,cpu_milli,memory_mib,num_gpu,gpu_milli`. Optional columns take the defaults of the FGD paper's
simulator (its `data/pod_csv_to_yaml.py`): no `memory_mib` = no memory request, no `gpu_milli` = whole
GPUs (1000 per device) for a pod with `num_gpu` > 0, no `gpu_spec` = any GPU model; `qos`, `pod_phase`
and the times are never read. An empty cell of an optional column takes the same default. The loader
says which columns it defaulted (`Loaded.warnings`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.model.types import NodeInfo
from scheduler.replay.gpu_models import DEFAULT_GPU_MEMORY_MIB, gpu_memory_mib
from scheduler.state.demand import PodDemand

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "num_gpu")
# Optional pod columns and what their absence means (the paper's simulator's defaults).
POD_OPTIONAL = {
    "memory_mib": "no host memory request",
    "gpu_milli": "whole GPUs (1000 milli per device) for pods with num_gpu > 0",
    "gpu_spec": "any GPU model",
}


class TraceError(ValueError):
    """The file as a whole cannot be used."""


@dataclass(frozen=True)
class RowError:
    path: str
    line: int
    column: str
    value: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: column {self.column}={self.value!r}: {self.message}"


class TraceNode(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    sn: str = Field(min_length=1)
    cpu_milli: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    gpu: int = Field(ge=0, le=64)
    model: str = ""

    @model_validator(mode="after")
    def _model_when_gpus(self) -> TraceNode:
        if self.gpu > 0 and not self.model:
            raise ValueError("model: a node with GPUs needs a GPU model")
        return self

    def node_info(self) -> NodeInfo:
        mem = gpu_memory_mib(self.model) if self.gpu else 0
        return NodeInfo(
            name=self.sn,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            gpu_count=self.gpu,
            gpu_model=self.model if self.gpu else "",
            gpu_memory_mib=mem if mem is not None else DEFAULT_GPU_MEMORY_MIB,
        )


class TracePod(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str = Field(min_length=1)
    cpu_milli: int = Field(ge=0)
    memory_mib: int = Field(default=0, ge=0)
    num_gpu: int = Field(ge=0, le=64)
    gpu_milli: int = Field(default=0, ge=0, le=MILLI_PER_GPU)
    gpu_spec: str = ""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, raw: Any) -> Any:
        """Absent or empty optional cells take the simulator's defaults (module docstring)."""
        if not isinstance(raw, dict):
            return raw
        out = {k: v for k, v in raw.items() if not (k in POD_OPTIONAL and v in ("", None))}
        if "gpu_milli" not in out:
            try:
                whole = int(str(out.get("num_gpu", "0")).strip() or "0") > 0
            except ValueError:
                whole = False  # num_gpu itself is reported as the bad column
            out["gpu_milli"] = MILLI_PER_GPU if whole else 0
        return out

    @field_validator("gpu_spec")
    @classmethod
    def _spec(cls, v: str) -> str:
        models = [m for m in v.split("|")] if v else []
        if any(not m.strip() for m in models):
            raise ValueError("empty model name in the |-separated list")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TracePod:
        if self.num_gpu == 0 and self.gpu_milli != 0:
            raise ValueError("gpu_milli: must be 0 when num_gpu is 0")
        if self.num_gpu > 0 and self.gpu_milli == 0:
            raise ValueError("gpu_milli: must be above 0 when num_gpu is above 0")
        if self.num_gpu > 1 and self.gpu_milli < MILLI_PER_GPU:
            raise ValueError("gpu_milli: below 1000 only allowed with num_gpu 1")
        return self

    @property
    def gpu_request_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    def demand(self) -> PodDemand:
        models = frozenset(m.strip() for m in self.gpu_spec.split("|")) if self.gpu_spec else None
        return PodDemand(
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            num_gpus=self.num_gpu,
            gpu_milli=self.gpu_milli,
            models=models if self.num_gpu else None,
        )


RowT = TypeVar("RowT", TraceNode, TracePod)


@dataclass
class Loaded(Generic[RowT]):
    rows: list[RowT]
    errors: list[RowError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _read(path: Path, required: tuple[str, ...]) -> tuple[list[dict[str, Any]], str]:
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceError(
                    f"{path}: missing column(s) {', '.join(missing)} (header: {','.join(header)})"
                )
            return list(reader), str(path)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{path}: cannot read: {exc}") from exc


def _row_error(path: str, line: int, raw: dict[str, Any], exc: ValidationError) -> RowError:
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ())]
    message = str(err.get("msg", "invalid"))
    column = loc[0] if loc else ""
    if not column and ":" in message:  # model-level check: "Value error, column: reason"
        head = message.removeprefix("Value error, ")
        column, _, message = head.partition(": ")
    value = raw.get(column)
    return RowError(path, line, column or "?", "" if value is None else str(value), message)


def _load(path: Path, required: tuple[str, ...], model: type[RowT], key: str) -> Loaded[RowT]:
    raw_rows, name = _read(path, required)
    out: Loaded[RowT] = Loaded(rows=[])
    seen: set[str] = set()
    for i, raw in enumerate(raw_rows):
        line = i + 2  # header is line 1
        clean = {k: (v.strip() if isinstance(v, str) else "") for k, v in raw.items() if k is not None}
        try:
            row = model.model_validate(clean)
        except ValidationError as exc:
            out.errors.append(_row_error(name, line, clean, exc))
            continue
        ident = getattr(row, key)
        if ident in seen:
            out.errors.append(RowError(name, line, key, ident, "duplicate name"))
            continue
        seen.add(ident)
        out.rows.append(row)
    if not out.rows:
        raise TraceError(f"{path}: no usable row" + (f" ({len(out.errors)} rejected)" if out.errors else ""))
    return out


def load_nodes(path: str | Path) -> Loaded[TraceNode]:
    loaded = _load(Path(path), NODE_COLUMNS, TraceNode, "sn")
    unknown = sorted({n.model for n in loaded.rows if n.gpu and gpu_memory_mib(n.model) is None})
    for m in unknown:
        loaded.warnings.append(
            f"{path}: GPU model {m!r} has no memory size on record; assuming {DEFAULT_GPU_MEMORY_MIB} MiB"
        )
    return loaded


def _header(path: Path) -> list[str]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            return next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return []  # `_read` reports the problem


def load_pods(path: str | Path) -> Loaded[TracePod]:
    loaded = _load(Path(path), POD_COLUMNS, TracePod, "name")
    header = [c.strip() for c in _header(Path(path))]
    for column, meaning in POD_OPTIONAL.items():
        if column not in header:
            loaded.warnings.append(f"{path}: no {column} column: {meaning}")
    return loaded
