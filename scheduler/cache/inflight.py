"""Binds planned together, kept until each has its answer: then all kept, or all undone at once.

A transaction's placements of one job form a `BindUnit` (a gang's members, or a single pod). The cluster
binds a pod at once, or accepts it in flight (asynchronous binding, `BindResult.in_flight`: the holding
stays ASSUMED in the ledger meanwhile). Once every member of a unit has its answer, the unit is resolved:

- all bound: the holdings are confirmed (BOUND) and each pod gets its `Scheduled` event;
- one failed: the unit is undone in the same cycle. Members already bound are evicted (a gang is never
  left partly running: there is no "unbind" in Kubernetes) and releasing until they are gone, every other
  member's holding is released, and the pods wait again with `BindFailed`: the failed one with its own
  error, the others naming it. They are placed again by the next cycle.

`InFlight` keeps the units that still have members in flight between cycles; `settle` applies the
outcomes the cluster reports (`Cluster.bind_outcomes`) at the start of a cycle, before the session opens,
and the events and reasons it produces are replayed into that session (`Deferred`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from scheduler.cache.cluster import BindOutcome, Cluster, EvictError
from scheduler.model.jobs import job_key
from scheduler.model.reasons import Reason
from scheduler.model.types import Placement, PodInfo

if TYPE_CHECKING:
    from scheduler.cache.cache import Cache

log = logging.getLogger(__name__)


class Answer(StrEnum):
    IN_FLIGHT = "in flight"
    BOUND = "bound"
    FAILED = "failed"
    NOT_TRIED = "not tried"  # a bind before it in the same unit failed at once


@dataclass
class Member:
    pod: PodInfo
    placement: Placement
    node: str
    message: str = ""  # the placement's message, for its Scheduled event
    answer: Answer = Answer.IN_FLIGHT
    error: str = ""


@dataclass
class BindUnit:
    action: str
    job: str
    members: list[Member]

    @property
    def answered(self) -> bool:
        return all(m.answer is not Answer.IN_FLIGHT for m in self.members)

    @property
    def failure(self) -> Member | None:
        return next((m for m in self.members if m.answer is Answer.FAILED), None)


class Books(Protocol):
    """Where a resolution is written: the open session, or `Deferred` before it opens."""

    def event(self, type_: str, action: str, pod: PodInfo, message: str = "", **extra: Any) -> None: ...

    def set_reason(self, pod: PodInfo, reason: Reason, message: str) -> None: ...


@dataclass
class Resolution:
    bound: list[PodInfo] = field(default_factory=list)  # kept
    evicted: list[PodInfo] = field(default_factory=list)  # bound, then undone
    failed: list[tuple[PodInfo, str]] = field(default_factory=list)  # waiting again, and why


def gpus_of(placement: Placement) -> list[dict[str, int]]:
    return [{"index": g.slot, "milli": g.milli} for g in placement.gpus]


def resolve(unit: BindUnit, cache: Cache, cluster: Cluster, books: Books) -> Resolution:
    """Keep every member of an answered unit, or undo them all (see the module's docstring)."""
    out = Resolution()
    if all(m.answer is Answer.BOUND for m in unit.members):
        for m in unit.members:
            cache.ledger.confirm(m.pod.uid)
            books.event("Scheduled", unit.action, m.pod, m.message, node=m.node, gpus=gpus_of(m.placement))
            out.bound.append(m.pod)
        return out
    cause = unit.failure or next(m for m in unit.members if m.answer is not Answer.BOUND)
    detail = f"binding {cause.pod.key} failed ({cause.error})" if cause is unit.failure else cause.error
    for m in unit.members:
        if m.answer is Answer.BOUND:
            if _undo(unit, m, detail, cache, cluster, books):
                out.evicted.append(m.pod)
            else:  # the eviction was refused: it keeps running (stale-gang eviction deals with it)
                cache.ledger.confirm(m.pod.uid)
                out.bound.append(m.pod)
            continue
        cache.ledger.release(m.pod.uid)
        pod = _back_to_pending(m.pod, cache)
        if pod is not None:
            books.set_reason(pod, Reason.BIND_FAILED, m.error)
            out.failed.append((pod, m.error))
    return out


def _undo(unit: BindUnit, m: Member, detail: str, cache: Cache, cluster: Cluster, books: Books) -> bool:
    """Evict a member bound before its unit failed; its resources are given back in this cycle."""
    message = f"undone: {unit.job} is bound whole or not at all, and {detail}; it is placed again next cycle"
    try:
        cluster.evict(m.pod, action=unit.action, message=message)
    except EvictError as exc:
        log.warning("could not undo the bind of %s (%s): its gang runs partly until stale", m.pod.key, exc)
        return False
    books.event("Evicted", unit.action, m.pod, message, node=m.node)
    # Being deleted: its job counts it no more, and it is releasing (on its GPU until it is gone, charged to
    # nobody), as any evicted pod; the watch shows it terminating, then gone.
    cache.mirror.deleting(m.pod.uid)
    cache.ledger.start_releasing(m.pod.uid)
    return True


def _back_to_pending(pod: PodInfo, cache: Cache) -> PodInfo | None:
    """The pod as the cycle knows it now (the mirror may hold a newer copy), waiting again; None when it is
    gone, or bound after all (the watch showed it: the bind's answer was lost, not the bind)."""
    current = cache.mirror.bind_failed(pod.uid)
    cache.index.touch(job_key(current or pod))
    return current


class InFlight:
    """Units with binds in flight, by the uid of each pod still in flight."""

    def __init__(self) -> None:
        self._units: dict[str, BindUnit] = {}

    def __len__(self) -> int:
        return len(self._units)

    def __contains__(self, uid: object) -> bool:
        return uid in self._units

    def add(self, unit: BindUnit) -> None:
        for m in unit.members:
            if m.answer is Answer.IN_FLIGHT:
                self._units[m.pod.uid] = unit

    def settle(self, outcomes: list[BindOutcome], cache: Cache, cluster: Cluster, books: Books) -> Resolution:
        """Apply the cluster's outcomes; resolve each unit once all its members are answered. Outcomes of
        pods no unit waits for (a scheduler rebuilt meanwhile) are left to the cluster's own events."""
        out = Resolution()
        for o in outcomes:
            unit = self._units.pop(o.uid, None)
            if unit is None:
                continue
            for m in unit.members:
                if m.pod.uid == o.uid and m.answer is Answer.IN_FLIGHT:
                    m.answer, m.error = (Answer.BOUND, "") if o.error is None else (Answer.FAILED, o.error)
            if unit.answered:
                done = resolve(unit, cache, cluster, books)
                out.bound += done.bound
                out.evicted += done.evicted
                out.failed += done.failed
        return out


@dataclass
class Deferred:
    """Events and reasons written before the cycle's session opens, replayed into it."""

    events: list[tuple[str, str, PodInfo, str, dict[str, Any]]] = field(default_factory=list)
    reasons: list[tuple[PodInfo, Reason, str]] = field(default_factory=list)

    def event(self, type_: str, action: str, pod: PodInfo, message: str = "", **extra: Any) -> None:
        self.events.append((type_, action, pod, message, extra))

    def set_reason(self, pod: PodInfo, reason: Reason, message: str) -> None:
        self.reasons.append((pod, reason, message))

    def replay(self, books: Books) -> None:
        for type_, action, pod, message, extra in self.events:
            books.event(type_, action, pod, message, **extra)
        for pod, reason, message in self.reasons:
            books.set_reason(pod, reason, message)
