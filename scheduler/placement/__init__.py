"""Placement: feasibility filters and scoring policies as array kernels."""

from scheduler.placement.explain import explain_unschedulable
from scheduler.placement.filters import feasible, gpu_fit, node_checks
from scheduler.placement.placer import best_row, place_one
from scheduler.placement.policy import Capabilities, PlacementPolicy
from scheduler.placement.registry import make_policy, policy_names, register

__all__ = [
    "Capabilities",
    "PlacementPolicy",
    "best_row",
    "explain_unschedulable",
    "feasible",
    "gpu_fit",
    "make_policy",
    "node_checks",
    "place_one",
    "policy_names",
    "register",
]
