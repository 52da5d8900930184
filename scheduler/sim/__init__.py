"""A simulated cluster implementing the same `Cluster` interface as the Kubernetes adapter."""

from scheduler.sim.cluster import SimCluster
from scheduler.sim.runner import SimResult, run_simulation

__all__ = ["SimCluster", "SimResult", "run_simulation"]
