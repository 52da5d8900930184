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
# otherwise. `wastefit` is the best on every published trace variant (`scheduler/replay/README.md`) and now
# costs ~1.4 x a `binpack` decision (docs/performance.md), but learned live from a handful of pods it can
# strand a whole-GPU pod on a small cluster (the faults scenario: 2 nodes x 2 GPUs, 1 run in 4) and it
# makes consolidation move pods ~6 x as often on the built-in demo: `binpack` stays the default until the
# live policy trusts a learned workload only once it has seen enough of it (docs/performance.md).
DEFAULT_POLICY = "binpack"

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
