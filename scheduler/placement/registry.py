"""Placement policies by name, shared by the live scheduler, `tessera replay` and `tessera bench`."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.placement.packing import BinpackPolicy, SpreadPolicy
from scheduler.placement.policy import PlacementPolicy

PolicyFactory = Callable[[], PlacementPolicy]

_REGISTRY: dict[str, PolicyFactory] = {
    "binpack": BinpackPolicy,
    "spread": SpreadPolicy,
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
