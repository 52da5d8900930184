"""Reservations: the planned new place of a pod that consolidation moves.

Kubernetes has no "move": consolidation evicts the pod and its controller recreates it. So that the move
lands where it was planned, the new place is reserved (a `RESERVED` holding in the ledger, under the pod's
namespace/name): its resources stay charged in the cluster state (nothing else can take them) and count to
the pod's queue. Next cycle, first thing, the `bind_reserved` action binds the recreated pod there. The recreated pod is recognised by its name (the simulator and
StatefulSets keep it), else as a pending pod of the same namespace and queue with the very same demand
(Jobs and ReplicaSets name their replacement anew). A reservation nobody claims lapses after
`RESERVATION_TTL_S`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.model import Placement, PodInfo
from scheduler.state.demand import PodDemand, demand_for

RESERVATION_TTL_S = 60.0


@dataclass(frozen=True)
class Reservation:
    pod_key: str  # namespace/name of the moved pod
    namespace: str
    queue: str
    demand: PodDemand
    placement: Placement
    beneficiary: str  # the job the move made room for
    expires_s: float

    @classmethod
    def of(
        cls, pod: PodInfo, queue: str, placement: Placement, beneficiary: str, *, expires_s: float
    ) -> Reservation:
        return cls(pod.key, pod.namespace, queue, demand_for(pod), placement, beneficiary, expires_s)


def match_reservations(reservations: dict[str, Reservation], pending: Iterable[PodInfo]) -> dict[str, str]:
    """pod uid -> reservation key for pending single pods that take a reservation (name first)."""
    if not reservations:
        return {}
    pods = [p for p in pending if p.group is None and p.error is None]
    matched: dict[str, str] = {}
    taken: set[str] = set()
    for p in pods:
        if p.key in reservations:
            matched[p.uid] = p.key
            taken.add(p.key)
    for p in pods:
        if p.uid in matched:
            continue
        d = demand_for(p)
        for key, res in reservations.items():
            if key not in taken and res.namespace == p.namespace and res.queue == p.queue and res.demand == d:
                matched[p.uid] = key
                taken.add(key)
                break
    return matched
