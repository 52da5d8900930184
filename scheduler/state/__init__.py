"""Cluster state as arrays (structure of arrays), updated incrementally."""

from scheduler.state.cluster_state import ClusterState, OvercommitError
from scheduler.state.codebook import Codebook
from scheduler.state.demand import PodDemand, demand_for

__all__ = ["ClusterState", "Codebook", "OvercommitError", "PodDemand", "demand_for"]
