"""The "typical workload" fragmentation is measured against: task types and how popular each is.

A task type is what a pod asks of one node (CPU, GPU milli per device, number of devices, acceptable
models). FGD (Weng et al., ATC 2023) keeps the most frequent types that together cover 95% of pods, with
their popularity renormalised to sum to 1. The arrays form (`WorkloadArrays`) is what the kernels use.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.placement.fragment_classes import SizeTables
from scheduler.state.backend import ArrayNamespace
from scheduler.state.codebook import Codebook
from scheduler.state.demand import PodDemand

DEFAULT_COVERAGE = 0.95


@dataclass(frozen=True, order=True)
class TaskType:
    cpu_milli: int
    gpu_milli: int  # per device; 0 for CPU-only pods
    num_gpus: int
    models: tuple[str, ...] = ()  # acceptable GPU models, empty = any

    @classmethod
    def of(cls, d: PodDemand) -> TaskType:
        milli = d.gpu_milli if d.uses_gpu else 0
        return cls(d.cpu_milli, milli, d.num_gpus if milli else 0, tuple(sorted(d.models or ())))


@dataclass(frozen=True)
class TypicalWorkload:
    types: tuple[TaskType, ...]
    popularity: tuple[float, ...]  # sums to 1
    memory_per_gpu: float | None = None  # MiB of host memory GPU pods ask per whole GPU, when known

    @classmethod
    def from_counts(cls, counts: Counter[TaskType], coverage: float = DEFAULT_COVERAGE) -> TypicalWorkload:
        """Most frequent types until `coverage` of all pods is reached (ties: by type, deterministic)."""
        total = sum(counts.values())
        if total <= 0:
            return cls((), ())
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        kept: list[tuple[TaskType, int]] = []
        covered = 0
        for task, n in ranked:
            if covered >= coverage * total:
                break
            kept.append((task, n))
            covered += n
        return cls(tuple(t for t, _ in kept), tuple(n / covered for _, n in kept))

    @classmethod
    def from_demands(
        cls, demands: Iterable[PodDemand], coverage: float = DEFAULT_COVERAGE
    ) -> TypicalWorkload:
        items = list(demands)
        base = cls.from_counts(Counter(TaskType.of(d) for d in items), coverage)
        gpu_pods = [d for d in items if d.uses_gpu and d.gpu_milli]
        gpus = sum(d.num_gpus * d.gpu_milli for d in gpu_pods) / MILLI_PER_GPU
        mem = sum(d.memory_mib for d in gpu_pods) / gpus if gpus > 0 else None
        return cls(base.types, base.popularity, mem)

    def __len__(self) -> int:
        return len(self.types)


@dataclass
class WorkloadArrays:
    """Typical workload as arrays over task types m (length M)."""

    milli: Any  # int64[M] GPU milli per device (0 = CPU-only type)
    count: Any  # int64[M] devices
    cpu: Any  # int64[M]
    weight: Any  # float64[M] popularity
    access: Any  # bool[models + 1, M]: row c+1 = a node of model code c can serve the type; row 0 = no GPU
    models_seen: int  # codebook size the access table was built for
    tables: SizeTables | None = None  # per-GPU terms by free milli (`fragment_classes.py`)
    weight_sum: float = 1.0  # sum of `weight`

    @classmethod
    def build(cls, xp: ArrayNamespace, wl: TypicalWorkload, models: Codebook) -> WorkloadArrays:
        n_models = len(models)
        access_rows: list[list[bool]] = [[t.gpu_milli == 0 for t in wl.types]]
        for code in range(n_models):
            name = models.name(code)
            access_rows.append([t.gpu_milli == 0 or not t.models or name in t.models for t in wl.types])

        def vec(values: list[Any], dtype: Any) -> Any:
            return xp.asarray(values, dtype=dtype) if values else xp.zeros((0,), dtype=dtype)

        access = (
            xp.asarray(access_rows, dtype=xp.bool) if wl.types else xp.zeros((n_models + 1, 0), dtype=xp.bool)
        )
        milli, count = [t.gpu_milli for t in wl.types], [t.num_gpus for t in wl.types]
        weight = vec(list(wl.popularity), xp.float64)
        return cls(
            milli=vec(milli, xp.int64),
            count=vec(count, xp.int64),
            cpu=vec([t.cpu_milli for t in wl.types], xp.int64),
            weight=weight,
            access=access,
            models_seen=n_models,
            tables=SizeTables.build(xp, milli, count),
            weight_sum=float(xp.sum(weight)),
        )
