"""`fragfit`: fragmentation gradient with a best-fit pull (this project's policy).

Same expected-fragment kernel as `fgd`, three changes measured on the openb protocol:

* the gain dF (fragment before minus after, milli) is kept continuous: 100 * sigmoid(dF / 1000)
  without FGD's integer floor, so nodes are ranked by the actual gradient, not by 40-milli buckets;
* a best-fit pull is *blended* in rather than used only on exact ties: + `pull` x bestfit/100, i.e.
  the fullest node earns up to `pull` units (about 40 milli of fragment each), which keeps fresh nodes
  whole for multi-GPU pods when the gradient barely differs;
* task types are weighted by GPU demand, not pod count: pods x (1 + GPUs asked), so whole-GPU and
  multi-GPU work, which fails first when GPUs fragment, counts in proportion to what it needs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.backend import ArrayNamespace
from scheduler.placement.bestfit import BestFitPolicy
from scheduler.placement.fgd import FragmentPolicy, NodeView
from scheduler.placement.policy import Array
from scheduler.placement.workload import TaskType, TypicalWorkload
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

_BESTFIT = BestFitPolicy()


def gpu_weighted(workload: TypicalWorkload, alpha: float = 1.0) -> TypicalWorkload:
    """Re-weight a typical workload by GPU demand: p_m x (1 + alpha x GPUs of m), renormalised."""
    if not workload.types:
        return workload
    counts: Counter[TaskType] = Counter()
    for t, p in zip(workload.types, workload.popularity, strict=True):
        counts[t] = p * (1.0 + alpha * t.gpu_milli * t.num_gpus / MILLI_PER_GPU)  # type: ignore[assignment]
    total = sum(counts.values())
    return TypicalWorkload(workload.types, tuple(counts[t] / total for t in workload.types))


@dataclass
class FragFitPolicy(FragmentPolicy):
    name: ClassVar[str] = "fragfit"
    pull: float = 3.0
    gpu_weight: float = 0.0
    tie_break: bool = False  # the blend replaces the tie-only secondary key

    def set_typical_workload(self, workload: TypicalWorkload) -> None:
        super().set_typical_workload(gpu_weighted(workload, self.gpu_weight))

    def transform(
        self, xp: ArrayNamespace, before: Array, after: Array, view: NodeView, d: PodDemand
    ) -> Array:
        return 100.0 / (1.0 + xp.exp(-(before - after) / float(MILLI_PER_GPU)))

    def score_nodes(
        self, xp: ArrayNamespace, state: ClusterState, d: PodDemand, feasible: Array, fit: Array
    ) -> Array:
        primary = self.primary_scores(xp, state, d)
        return primary + self.pull * _BESTFIT.score_nodes(xp, state, d, feasible, fit) / 100.0
