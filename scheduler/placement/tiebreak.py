"""Secondary key for policies whose scores tie often: best fit.

The FGD paper's policies give integer node scores (FGD: floor(100 * sigmoid(dF / 1000))), so many nodes
tie. Picking among them uniformly at random spreads pods over fresh nodes and breaks the whole nodes
multi-GPU pods need (measured on openb: FGD leaves 10.5% unallocated that way against the published
4.77%); ordering them by the `bestfit` score (the node left with the least free CPU and GPU) reproduces
the published curves. The composite keeps the policy's order: policy score x 1000 + best fit (0..100).
Each policy passes its own `BestFitPolicy` (whose caches are kept for that policy's state).
"""

from __future__ import annotations

from scheduler.placement.bestfit import BestFitPolicy
from scheduler.placement.policy import Array
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays

POLICY_WEIGHT = 1000.0


def with_tiebreak(
    bestfit: BestFitPolicy, state: NodeArrays, d: PodDemand, feasible: Array, fit: Array, score: Array
) -> Array:
    """`score` must be integral (or -inf) for the secondary key to act only on ties."""
    return score * POLICY_WEIGHT + bestfit.score_nodes(state, d, feasible, fit)
