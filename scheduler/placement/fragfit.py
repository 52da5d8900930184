"""`fragfit`: fragmentation gradient, CPU-aware, with a best-fit pull (this project's policy).

Same expected-fragment kernel and per-node cache as `fgd`, three changes measured on the openb protocol:

* CPU- and memory-aware fragment. FGD counts a node's free GPUs as fragment for a task type only
  once its free CPU is already below that type's need; it cannot see CPU being eaten away pod by pod
  (CPU-only pods take 18% of the openb cluster's CPU) until GPUs are stranded. fragfit adds to the
  node's fragment `cpu_weight` x the free GPU milli that the node's free CPU cannot serve at the typical
  workload's CPU-per-GPU ratio (c = sum p_m cpu_m / sum p_m GPUs_m): max(0, free milli - 1000 x free
  CPU / c); likewise `memory_weight` for host memory (MiB per GPU asked by the pod list's GPU pods; the
  live scheduler, which learns its workload online, has no such figure and leaves this term out).
* The gain dF (fragment before minus after, milli) stays continuous, 100 * sigmoid(dF / 1000), instead
  of FGD's integer floor: nodes and the GPU inside a node are ranked by the gradient, not 40-milli buckets.
* Best fit is blended in instead of only ordering exact ties: + `pull` x bestfit / 100 (the fullest node
  earns up to `pull` units, ~40 milli of fragment each), so where the gradient barely differs the pod
  goes to the fuller node and fresh nodes stay whole for multi-GPU pods.

* Model scarcity (`scarcity.py`): a placement on a GPU model that model-constrained pods will need is
  charged `model_weight` x pressure x the milli taken, as extra fragment; zero without such pods.

Measured, seeds 42-51, tune 1.3 (unallocated GPU % at 100% arrived): fgd 4.85; continuous + pull
alone 4.78; with the CPU term 4.21; with CPU and memory terms 4.18 (sd 0.02, below fgd on every seed).
Weights 0.5..2 and pull 1.5..3 measured equivalent; see `scheduler/replay/README.md`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.placement.fragment_policy import FragmentPolicy, NodeView
from scheduler.placement.policy import Array
from scheduler.placement.scarcity import gpus_per_model, model_pressure, pressure_table
from scheduler.placement.workload import TypicalWorkload
from scheduler.state.backend import ArrayNamespace
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays

CPU_WEIGHT = 1.0  # 0.5..2 measured equivalent on openb (4.21..4.24); 0 turns the CPU term off
# Milli of fragment charged per milli taken on a model at pressure 1 (`scarcity.py`). gpuspec lists,
# wastefit, one seed each (unallocated % at 100%): weight 2 / 4 / 8: gpuspec10 3.97 / 3.98 / 4.02,
# gpuspec20 4.13 / 4.19 / 4.31, gpuspec33 5.66 / 5.34 / 5.46 (0.5: 9.29; none: 14.42); gpuspec05 (seed
# 43) 2 / 3 / 4: 3.94 / 3.98 / 4.00. Without constrained types the term is zero.
MODEL_WEIGHT = 2.0


def cpu_per_gpu(workload: TypicalWorkload) -> float | None:
    """Milli-CPU the typical workload asks per whole GPU (None without GPU task types)."""
    gpu_types = [(p, t) for t, p in zip(workload.types, workload.popularity, strict=True) if t.gpu_milli]
    gpus = sum(p * t.gpu_milli * t.num_gpus for p, t in gpu_types) / MILLI_PER_GPU
    if gpus <= 0:
        return None
    return sum(p * t.cpu_milli for p, t in gpu_types) / gpus


def _shortfall(xp: ArrayNamespace, free_milli: Array, free: Array, ratio: float | None) -> Array:
    """max(0, free milli - 1000 x free / ratio): GPU milli the free CPU (memory) cannot serve."""
    if not ratio:
        return xp.zeros(free_milli.shape, dtype=xp.float64)
    short = free_milli - xp.astype(free, xp.float64) * (MILLI_PER_GPU / ratio)
    return xp.maximum(short, xp.zeros((), dtype=xp.float64))


@dataclass
class FragFitPolicy(FragmentPolicy):
    name: ClassVar[str] = "fragfit"
    pull: float = 3.0
    cpu_weight: float = CPU_WEIGHT
    memory_weight: float = CPU_WEIGHT  # the same for host memory (known when built from a pod list)
    tie_break: bool = False  # the blend replaces the tie-only secondary key
    model_weight: float = MODEL_WEIGHT  # milli of fragment per milli taken on a model at pressure 1
    _ratio: tuple[int, float | None] = field(default=(0, None), init=False, repr=False)
    _pressure: tuple[tuple[Any, ...], Array | None] = field(default=((), None), init=False, repr=False)
    _constrained: tuple[TypicalWorkload | None, bool] = field(default=(None, False), init=False, repr=False)

    def _cpu_ratio(self) -> float | None:
        wl = self.workload
        if wl is None:
            return None
        if self._ratio[0] != id(wl):
            self._ratio = (id(wl), cpu_per_gpu(wl))
        return self._ratio[1]

    def cpu_shortfall(self, xp: ArrayNamespace, free_milli: Array, free_cpu: Array) -> Array:
        """float64[R]: free GPU milli beyond what the free CPU can serve at the typical ratio."""
        return _shortfall(xp, free_milli, free_cpu, self._cpu_ratio())

    def memory_shortfall(self, xp: ArrayNamespace, free_milli: Array, free_mem: Array) -> Array:
        """float64[R]: free GPU milli beyond what the free host memory can serve at the typical ratio."""
        return _shortfall(xp, free_milli, free_mem, self.workload.memory_per_gpu if self.workload else None)

    def shortfall_changes(self, xp: ArrayNamespace, view: NodeView, d: PodDemand) -> list[Array]:
        """float64[R] each, for host memory then CPU (those weighted, with a known ratio): weight x how much
        the pod shrinks the node's shortfall (free GPU milli its free memory or CPU cannot serve), each
        `_shortfall` before minus after. Written out flat: it runs on every decision, on a handful of rows,
        where numpy's per-call overhead is the cost (integers below 2^53: converting before or after the
        subtraction gives the same floats)."""
        memory_ratio = self.workload.memory_per_gpu if self.workload is not None else None
        cpu_ratio = self._cpu_ratio()
        if not ((self.memory_weight and memory_ratio) or (self.cpu_weight and cpu_ratio)):
            return []
        f64 = xp.float64
        zero = xp.zeros((), dtype=f64)
        total = xp.astype(view.total(xp), f64)
        total_after = total - xp.astype(view.need, f64) * float(d.num_gpus)
        out = []
        for weight, ratio, free, ask in (
            (self.memory_weight, memory_ratio, view.mem, d.memory_mib),
            (self.cpu_weight, cpu_ratio, view.cpu, d.cpu_milli),
        ):
            if weight and ratio:  # no ratio: no shortfall before or after
                scale = MILLI_PER_GPU / ratio
                have = xp.astype(free, f64)
                before = xp.maximum(total - have * scale, zero)
                after = xp.maximum(total_after - (have - float(ask)) * scale, zero)
                out.append(weight * (before - after))
        return out

    def model_pressure(self, state: NodeArrays) -> Array | None:
        """float64[models + 1] pressure by model code + 1 (`scarcity.py`); None when no type constrains
        the model. Cached on the workload and the cluster's GPUs per model; a change clears the scores."""
        wl = self.workload
        if wl is None or not self.model_weight:
            return None
        if self._constrained[0] is not wl:  # asked once per decision: the answer is kept per workload
            self._constrained = (wl, any(t.models for t in wl.types))
        if not self._constrained[1]:
            return None
        gpus = gpus_per_model(state)
        key = (id(wl), len(state.models), tuple(sorted(gpus.items())))
        if self._pressure[0] != key:
            table = pressure_table(state.xp, model_pressure(wl, gpus), state.models)
            self._pressure = (key, table)
            self._cache.clear()
        return self._pressure[1]

    def pressure_cost(self, xp: ArrayNamespace, view: NodeView, d: PodDemand) -> Array | None:
        """float64[R]: milli of extra fragment for the milli the pod takes on each row's model."""
        table = self._pressure[1]
        if table is None or not d.uses_gpu:
            return None
        taken = xp.astype(view.need, xp.float64) * float(d.num_gpus)
        return self.model_weight * xp.take(table, view.model) * taken

    def primary_scores(self, state: NodeArrays, d: PodDemand) -> Array:
        if self.workload is not None:
            self.model_pressure(state)
        return super().primary_scores(state, d)

    def transform(
        self, xp: ArrayNamespace, before: Array, after: Array, view: NodeView, d: PodDemand
    ) -> Array:
        gain = before - after
        cost = self.pressure_cost(xp, view, d)
        if cost is not None:
            gain = gain - (cost[:, None] if len(gain.shape) == 2 else cost)
        for extra in self.shortfall_changes(xp, view, d):
            gain = gain + (extra[:, None] if len(gain.shape) == 2 else extra)
        return 100.0 / (1.0 + xp.exp(-gain / float(MILLI_PER_GPU)))

    def trained_scores(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        primary = self.primary_scores(state, d)
        return primary + self.pull * self._bestfit.score_nodes(state, d, feasible, fit) / 100.0
