"""`fgd`: fragmentation gradient descent (Weng et al., USENIX ATC 2023).

Place a pod where the fragment of the typical workload grows least, and inside the node on the GPU
where it grows least. Scores follow the published simulator: floor(100 * sigmoid(dF / 1000)), dF the
fragment before minus after in milli, so nodes within a few tens of milli of each other tie. Ties
between nodes go to the best fit (`bestfit` score as a secondary key, see `tiebreak.py`), remaining
ties to the caller (random in replay); ties between GPUs to the lowest index. The workload, node views
and score cache are `FragmentPolicy`'s (`fragment_policy.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.placement.fragment_policy import FragmentPolicy, NodeView
from scheduler.placement.policy import Array
from scheduler.state.backend import ArrayNamespace
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays


def sigmoid_score(xp: ArrayNamespace, gain: Array) -> Array:
    """The published simulator's integer node score: floor(100 * sigmoid(gain / 1000))."""
    return xp.floor(100.0 / (1.0 + xp.exp(-gain / float(MILLI_PER_GPU))))


@dataclass
class FgdPolicy(FragmentPolicy):
    """FGD as published (integer sigmoid score, so many near-equal nodes tie and are picked at random)."""

    name: ClassVar[str] = "fgd"

    def transform(
        self, xp: ArrayNamespace, before: Array, after: Array, view: NodeView, d: PodDemand
    ) -> Array:
        return sigmoid_score(xp, before - after)


@dataclass
class FgdNameOrderPolicy(FgdPolicy):
    """`fgd` with the published simulator's literal tie rule: among equal scores the node whose name sorts
    first (its vendored kube-scheduler `selectHost` keeps the smallest name). The replay adds nodes in
    name order, so that is the lowest row. On gpuspec33 this reproduces the paper (12.15 against 12.16,
    seeds 42-51) where best-fit ties leave 13.3; on the default list it leaves 4.99 (paper 4.77, best-fit
    ties 4.85); see `scheduler/replay/README.md`."""

    name: ClassVar[str] = "fgd-name"

    def trained_scores(self, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array) -> Array:
        xp = state.xp
        primary = self.primary_scores(state, d)
        n = int(primary.shape[0])
        return primary * float(2 * n) - xp.astype(xp.arange(n), xp.float64)
