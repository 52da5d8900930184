"""`WorkloadLearner`: the live scheduler's typical workload, learned from the pods it knows.

The fragment-driven policies (`fgd`, `fragfit`, `wastefit`) measure fragmentation against a typical
workload (`workload.py`). The replay hands over its trace's; the live scheduler learns one here, from the
pods in its cache:
- each pod counts once, when first seen: a pod that cannot run is asked about every cycle, and counting
  asks let one such pod (the demo's `wants-a100`, asked 900 times) make half the workload;
- over the most recent `WINDOW` pods, so the workload follows what the teams run now;
- only from `MIN_PODS` pods on: before that the policy has no workload and places as `binpack` does. A
  workload learned from a restarted scheduler's first three or four pods made `wastefit` spread fractions
  over a small cluster's GPUs and strand a whole-GPU pod (`tests/kube/test_kube_faults.py`, 1 run in 4);
- relearned at `MIN_PODS`, twice that, four times ... then every `RELEARN_EVERY` new pods: each new
  workload clears the policy's score cache, so it is not rebuilt every cycle;
- a share asked by memory (`gpu-memory`) counts as the milli it takes on the GPUs it may run on (the
  median memory of those in the cluster): otherwise a notebook asking 10 GB would count as a CPU-only pod.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.model.types import PodInfo
from scheduler.placement.workload import DEFAULT_COVERAGE, TaskType, TypicalWorkload
from scheduler.state.backend import to_numpy
from scheduler.state.demand import PodDemand, size_of
from scheduler.state.node_arrays import NodeArrays

MIN_PODS = 64  # distinct pods seen before the workload is trusted
WINDOW = 4096  # the workload is that of the most recent pods seen
RELEARN_EVERY = 512  # new pods between two workloads, once past MIN_PODS x 2^k
SAMPLES_KEPT = 4096  # distinct pod sizes remembered


@dataclass(frozen=True)
class _Sample:
    task: TaskType
    memory_mib: int  # host memory asked, for the GPU pods' memory per GPU
    gpus: float  # GPUs asked (milli / 1000 x devices)


@dataclass
class WorkloadLearner:
    coverage: float = DEFAULT_COVERAGE  # the policy's (`Capabilities.workload_coverage`)
    min_pods: int = MIN_PODS
    window: int = WINDOW
    relearn_every: int = RELEARN_EVERY
    _known: set[str] = field(default_factory=set, init=False, repr=False)
    _recent: deque[_Sample] = field(default_factory=deque, init=False, repr=False)
    _counts: Counter[TaskType] = field(default_factory=Counter, init=False, repr=False)
    _samples: dict[tuple[int, int, int, int, frozenset[str] | None], _Sample] = field(
        default_factory=dict, init=False, repr=False
    )
    _memory: float = field(default=0.0, init=False, repr=False)  # sums over the GPU pods in the window
    _gpus: float = field(default=0.0, init=False, repr=False)
    _seen: int = field(default=0, init=False, repr=False)  # pods counted, in all
    _learned_at: int = field(default=0, init=False, repr=False)

    @property
    def seen(self) -> int:
        """Distinct pods counted so far."""
        return self._seen

    def observe(self, pods: Mapping[str, PodInfo], state: NodeArrays) -> TypicalWorkload | None:
        """Count the pods not seen before; a new workload when it is time for one, else None."""
        new = pods.keys() - self._known
        if new or len(pods) != len(self._known):
            # Forget the pods that are gone (else the set grows forever); a pod comes back only as a new uid.
            self._known = set(pods.keys())
        mib_per_gpu: dict[frozenset[str] | None, float | None] = {}

        def gpu_mib_total(models: frozenset[str] | None) -> float | None:
            if models not in mib_per_gpu:
                mib_per_gpu[models] = _median_gpu_mib(state, models)
            return mib_per_gpu[models]

        def counted(pod: PodInfo) -> bool:
            if pod.error is not None or not pod.ours:
                return False
            req = pod.request  # a size in MiB with no GPU it may use here (yet): no evidence of a size
            return not (req.kind == "memory" and req.memory_mib and gpu_mib_total(pod.gpu_models) is None)

        order = sorted(new)  # sorted: the same window whatever the dict's order
        if len(order) > self.window:
            order = self._burst(order, pods, counted)
        for uid in order:
            pod = pods[uid]
            if not counted(pod):
                continue
            d = size_of(pod)  # (not demand_for: only its size is counted)
            if d.gpu_mib:
                total = gpu_mib_total(d.models)
                assert total is not None  # (counted)
                d = replace(d, gpu_milli=min(MILLI_PER_GPU, math.ceil(d.gpu_mib * MILLI_PER_GPU / total)))
            self._add(d)
        if self._seen < self.min_pods:
            return None
        if self._learned_at and self._seen - self._learned_at < min(self.relearn_every, self._learned_at):
            return None
        self._learned_at = self._seen
        base = TypicalWorkload.from_counts(self._counts, self.coverage)
        memory = self._memory / self._gpus if self._gpus > 0 else None
        return TypicalWorkload(base.types, base.popularity, memory)

    def _burst(
        self, order: list[str], pods: Mapping[str, PodInfo], counted: Callable[[PodInfo], bool]
    ) -> list[str]:
        """More new pods than the window holds (a restarted scheduler counts every running pod): only the last
        `window` counted ones stay in it, so only those are sized; the others are counted as seen. The window
        is then theirs alone (what it held before would have left it)."""
        kept = 0
        cut = len(order)
        while cut > 0 and kept < self.window:
            cut -= 1
            kept += counted(pods[order[cut]])
        if kept < self.window:
            return order  # (not enough counted ones to fill it)
        self._seen += sum(1 for uid in order[:cut] if counted(pods[uid]))
        self._recent.clear()
        self._counts.clear()
        self._memory = self._gpus = 0.0
        return order[cut:]

    def _add(self, d: PodDemand) -> None:
        # Pods repeat a few sizes: one sample per size (immutable, shared), not a TaskType and a sample a pod
        # (a restarted scheduler counts every running pod).
        key = (d.cpu_milli, d.memory_mib, d.num_gpus, d.gpu_milli, d.models)
        sample = self._samples.get(key)
        if sample is None:
            if len(self._samples) >= SAMPLES_KEPT:
                self._samples.clear()
            sample = _Sample(TaskType.of(d), d.memory_mib, d.num_gpus * d.gpu_milli / MILLI_PER_GPU)
            self._samples[key] = sample
        self._recent.append(sample)
        self._counts[sample.task] += 1
        if sample.gpus:
            self._memory += sample.memory_mib
            self._gpus += sample.gpus
        self._seen += 1
        if len(self._recent) > self.window:
            old = self._recent.popleft()
            self._counts[old.task] -= 1
            if not self._counts[old.task]:
                del self._counts[old.task]
            if old.gpus:
                self._memory -= old.memory_mib
                self._gpus -= old.gpus


def _median_gpu_mib(state: NodeArrays, models: frozenset[str] | None) -> float | None:
    """Median memory (MiB) of the cluster's GPUs of `models` (any model: None or empty); None if none."""
    total = to_numpy(state.total_mib)
    present = to_numpy(state.present) & (total > 0)
    if models:
        codes = [c for c in (state.models.get(m) for m in models) if c is not None]
        model = to_numpy(state.model)
        present &= np.isin(model, codes)[:, None]
    values = total[present]
    return float(np.median(values)) if values.size else None
