"""What the scheduler keeps between cycles, in five parts (see docs/architecture.md):

- `ledger` (`scheduler/cache/ledger.py`): who holds what: the cluster arrays, the pods' and reserved places,
  charged to queues through usage listeners;
- `mirror` (`scheduler/cache/mirror.py`): the cluster as the watches show it (nodes into the arrays, pods,
  queues, pod groups), accounting running pods into the ledger;
- `index` (`scheduler/cache/job_index.py`): the jobs, kept across cycles, and what each queue's jobs hold;
- `inflight` (`scheduler/cache/inflight.py`): binds planned together whose outcomes are still to come;
- `handoff` (`scheduler/cache/handoff.py`, kept by the mirror): the pods bound and waiting for the device
  plugin's `Allocate`, one per node.

Memory of the actions (what consolidation found futile, since when a gang is below minMember) is kept by
the actions themselves; this is only the cluster's picture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.api.keys import SCHEDULER_NAME
from scheduler.api.podgroup import PodGroup
from scheduler.api.queue import Queue
from scheduler.api.topology import Topology
from scheduler.cache.cluster import WatchEvent
from scheduler.cache.error_log import ErrorLog
from scheduler.cache.gc_pause import paused_gc
from scheduler.cache.handoff import Handoff, HandoffRule
from scheduler.cache.inflight import InFlight
from scheduler.cache.job_index import JobIndex
from scheduler.cache.ledger import Ledger
from scheduler.cache.mirror import ClusterMirror
from scheduler.cache.pod_topology import PodTopology
from scheduler.cache.volumes import VolumeCatalog
from scheduler.model.types import Placement, PodInfo
from scheduler.state.backend import ArrayNamespace
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand


@dataclass
class Cache:
    ledger: Ledger
    mirror: ClusterMirror
    error_log: ErrorLog
    inflight: InFlight = field(default_factory=InFlight)
    # Victims whose eviction a disruption budget refused (`--disruption-budgets respect`): pod uid -> the
    # session time until which no victim search takes them (scheduler/framework/eviction.py).
    refused: dict[str, float] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        xp: ArrayNamespace,
        *,
        max_gpus: int = 8,
        capacity: int = 64,
        scheduler_name: str = SCHEDULER_NAME,
        handoff: HandoffRule | None = None,
    ) -> Cache:
        """`scheduler_name`: what pods of this scheduler name (`PodInfo.ours`); `handoff`: which pods wait for a
        device plugin's Allocate after their bind (None: none do, as in a simulation)."""
        ledger = Ledger(ClusterState(xp, max_gpus=max_gpus, capacity=capacity))
        errors = ErrorLog()
        mirror = ClusterMirror(ledger, errors, scheduler_name=scheduler_name, handoff=handoff)
        return cls(ledger=ledger, mirror=mirror, error_log=errors)

    def apply(self, events: list[WatchEvent]) -> None:
        with paused_gc(len(events)):
            self.mirror.apply(events)

    @property
    def handoff(self) -> Handoff:
        return self.mirror.handoff

    @property
    def index(self) -> JobIndex:
        return self.mirror.index

    @property
    def state(self) -> ClusterState:
        return self.ledger.state

    @property
    def xp(self) -> ArrayNamespace:
        return self.ledger.state.xp

    @property
    def pod_topology(self) -> PodTopology:
        return self.mirror.pod_topology

    @property
    def volumes(self) -> VolumeCatalog:
        return self.mirror.volumes

    def pod_rules(self, d: PodDemand) -> list[tuple[str, Any]]:
        """What the pod's volumes and inter-pod rules say of every node, in kube-scheduler's filter order
        (VolumeBinding, VolumeZone, PodTopologySpread, InterPodAffinity): (reason, bool[C] rows that pass)."""
        return self.volumes.checks(d) + self.pod_topology.checks(d)

    def pod_mask(self, d: PodDemand) -> Any | None:
        """bool[C]: the rows the pod's volumes and inter-pod rules allow; None when none applies."""
        vol, topo = self.volumes.mask(d), self.pod_topology.mask(d)
        if vol is None or topo is None:
            return topo if vol is None else vol
        return vol & topo

    @property
    def pods(self) -> dict[str, PodInfo]:
        return self.mirror.pods

    @property
    def queues(self) -> dict[str, Queue]:
        return self.mirror.specs.queues

    @property
    def podgroups(self) -> dict[str, PodGroup]:
        return self.mirror.specs.podgroups

    @property
    def topologies(self) -> dict[str, Topology]:
        return self.mirror.specs.topologies

    @property
    def errors(self) -> list[str]:
        """The latest objects we could not use, for people (bounded: see `ErrorLog`)."""
        return self.error_log.latest()

    @property
    def placements(self) -> dict[str, Placement]:
        """A snapshot of what each pod holds, by uid (reserved places are in `ledger.reserved`)."""
        return {uid: h.placement for uid, h in self.ledger.pods.items()}
