"""Placement policies by name, shared by the live scheduler, `tessera replay` and `tessera bench`."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.placement.bestfit import BestFitPolicy
from scheduler.placement.dotprod import DotProductPolicy
from scheduler.placement.fgd import FgdNameOrderPolicy, FgdPolicy
from scheduler.placement.fragfit import FragFitPolicy
from scheduler.placement.gpu_packing import GpuPackingPolicy
from scheduler.placement.level_policy import BinpackPolicy, SpreadPolicy
from scheduler.placement.policy import PlacementPolicy
from scheduler.placement.random_score import RandomPolicy
from scheduler.placement.wastefit import WasteFitPolicy

PolicyFactory = Callable[[], PlacementPolicy]

# The placement of the live scheduler, the chart, `tessera simulate` and `tessera bench` unless told
# otherwise: the best on every published trace variant (`scheduler/replay/README.md`), at ~1.4 x a `binpack`
# decision (docs/performance.md). Live, it places as `binpack` until it has seen enough distinct pods to
# trust the typical workload it learns from them (`live_workload.py`).
DEFAULT_POLICY = "wastefit"

_REGISTRY: dict[str, PolicyFactory] = {
    "binpack": BinpackPolicy,
    "spread": SpreadPolicy,
    "random": RandomPolicy,
    "dotprod": DotProductPolicy,
    "packing": GpuPackingPolicy,
    "bestfit": BestFitPolicy,
    "fgd": FgdPolicy,
    "fgd-name": FgdNameOrderPolicy,
    "fragfit": FragFitPolicy,
    "wastefit": WasteFitPolicy,
}


def register(name: str, factory: PolicyFactory) -> None:
    _REGISTRY[name] = factory


def policy_names() -> list[str]:
    return sorted(_REGISTRY)


def make_policy(name: str) -> PlacementPolicy:
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ValueError(
            f"unknown placement policy {name!r}; choose one of {', '.join(policy_names())}"
        ) from None
