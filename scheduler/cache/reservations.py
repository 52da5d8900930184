"""Reservations: a place kept for a pod that cannot be bound there yet.

Two kinds of pods get one:
- a pod consolidation moves. Kubernetes has no "move": the pod is evicted and its controller recreates
  it. The recreated pod is recognised by its name (the simulator and StatefulSets keep it), else as a
  pending pod of the same namespace and queue with the very same demand (Jobs and ReplicaSets name their
  replacement anew);
- a pod placed where evicted pods are still terminating (pipelined, `uid` set): it is bound there once
  the pods it `waits_for` are gone; a gang's members (`group`) are bound together;
- a fraction queued behind the device plugin (`handoff`, `uid` set): its place shares a GPU on a node
  where a pod bound by us waits for `Allocate` (at most one does per node, `scheduler/cache/handoff.py`),
  and every place elsewhere would start an unused GPU; it is bound there once no pod waits on that node
  (`Session.behind_handoff` says when a pod queues so).
The place is a `RESERVED` holding in the ledger under the pod's namespace/name: its resources stay
charged in the cluster state (nothing else can take them) and count to the pod's queue. First thing each
cycle the `bind_reserved` action binds the pods whose reservations are ready. A reservation that cannot be
honoured (unclaimed, its victims still there after `expires_s`, its pod or node gone) is dropped with a
reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.model.types import Placement, PodInfo
from scheduler.state.demand import PodDemand, demand_for

RESERVATION_TTL_S = 60.0


@dataclass(frozen=True)
class Reservation:
    pod_key: str  # namespace/name of the moved or pipelined pod
    namespace: str
    queue: str
    demand: PodDemand
    placement: Placement
    beneficiary: str  # the job the move made room for (a pipelined pod: its own job)
    expires_s: float
    uid: str | None = None  # a pipelined pod: exactly this pod takes the place
    waits_for: frozenset[str] = frozenset()  # uids of releasing pods that must be gone first
    group: str | None = None  # a pipelined gang's key: its members are bound together
    action: str = "consolidate"  # the action that planned it (reported with the bind)
    handoff: bool = False  # waits until no pod on its node waits for the device plugin (not for victims)

    @classmethod
    def of(
        cls, pod: PodInfo, queue: str, placement: Placement, beneficiary: str, *, expires_s: float
    ) -> Reservation:
        return cls(pod.key, pod.namespace, queue, demand_for(pod), placement, beneficiary, expires_s)

    @classmethod
    def pipelined(
        cls, pod: PodInfo, queue: str, placement: Placement, job: str, *, waits_for: frozenset[str],
        expires_s: float, action: str,
    ) -> Reservation:  # fmt: skip
        return cls(pod.key, pod.namespace, queue, demand_for(pod), placement, job, expires_s,
                   uid=pod.uid, waits_for=waits_for, group=job, action=action)  # fmt: skip

    @classmethod
    def behind_handoff(
        cls, pod: PodInfo, queue: str, placement: Placement, job: str, *, expires_s: float, action: str
    ) -> Reservation:
        """A single pod's place on a node whose pod waits for the device plugin: bound on its own (no group)
        as soon as none does."""
        return cls(pod.key, pod.namespace, queue, demand_for(pod), placement, job, expires_s,
                   uid=pod.uid, action=action, handoff=True)  # fmt: skip


def match_reservations(reservations: dict[str, Reservation], pending: Iterable[PodInfo]) -> dict[str, str]:
    """pod uid -> reservation key for pending pods that take a reservation: a pipelined pod its own,
    a recreated single pod one by its name, else by namespace, queue and demand."""
    if not reservations:
        return {}
    pending = list(pending)
    matched: dict[str, str] = {}
    taken: set[str] = set()
    by_uid = {res.uid: key for key, res in reservations.items() if res.uid is not None}
    for p in pending:
        key = by_uid.get(p.uid)
        if key is not None:
            matched[p.uid] = key
            taken.add(key)
    if all(res.uid is not None for res in reservations.values()):  # only pods' own places (pipelined,
        return matched  # queued behind the plugin): none to match by name or by kind
    pods = [p for p in pending if p.group is None and p.error is None and p.uid not in matched]
    for p in pods:
        res = reservations.get(p.key)
        if res is not None and res.uid is None and p.key not in taken:
            matched[p.uid] = p.key
            taken.add(p.key)
    for p in pods:
        if p.uid in matched:
            continue
        d = demand_for(p)
        for key, res in reservations.items():
            if key in taken or res.uid is not None:
                continue
            if res.namespace == p.namespace and res.queue == p.queue and res.demand == d:
                matched[p.uid] = key
                taken.add(key)
                break
    return matched
