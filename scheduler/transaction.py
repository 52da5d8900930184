"""A transaction over the session (KAI's "statement"): actions try placements and evictions on the
snapshot, then either commit them to the cluster or roll every one of them back.

Nothing reaches the cluster before `commit`: a gang that cannot be placed whole, or a reclaim whose
beneficiary still does not fit, leaves no trace.

A third kind of step, `reserve`, plans where an evicted pod goes next (consolidation moves pods). The
Cluster interface has no "move": the victim is evicted and its controller recreates it, so at commit the
planned place becomes a reservation in the cache (it keeps its resources charged) and `allocate` binds the
recreated pod there first thing next cycle (see `scheduler/reservations.py`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.cluster import BindError, Cluster, EvictError
from scheduler.model import Placement, PodInfo, PodPhase
from scheduler.reservations import RESERVATION_TTL_S, Reservation
from scheduler.resources import placement_usage
from scheduler.session import Session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Op:
    kind: Literal["place", "evict", "reserve"]
    pod: PodInfo
    queue: str
    placement: Placement
    action: str
    message: str = ""
    beneficiary: str = ""  # the job an eviction or reservation makes room for


@dataclass(frozen=True)
class Outcome:
    bound: list[PodInfo]
    evicted: list[PodInfo]
    failed: list[tuple[PodInfo, str]]


class Transaction:
    def __init__(self, session: Session, action: str) -> None:
        self.session = session
        self.action = action
        self.ops: list[Op] = []
        self._state_cp = session.cache.state.checkpoint()

    # ---------------------------------------------------------------------------------- simulate
    def place(self, pod: PodInfo, queue: str, placement: Placement, message: str = "") -> None:
        s = self.session
        s.cache.state.place(placement)
        s.cache.assume(pod, placement)
        s.charge(queue, placement_usage(placement), +1, pod)
        self.ops.append(Op("place", pod, queue, placement, self.action, message))

    def evict(self, pod: PodInfo, queue: str, message: str, beneficiary: str = "") -> None:
        s = self.session
        placement = s.cache.unassume(pod.uid)
        if placement is None:
            raise ValueError(f"pod {pod.key} holds nothing to evict")
        s.cache.state.release(placement)
        s.charge(queue, placement_usage(placement), -1, pod)
        self.ops.append(Op("evict", pod, queue, placement, self.action, message, beneficiary))

    def reserve(self, pod: PodInfo, queue: str, placement: Placement, beneficiary: str) -> None:
        """Plan the new place of a pod evicted in this transaction (it is recreated and bound there)."""
        s = self.session
        s.cache.state.place(placement)
        s.charge(queue, placement_usage(placement), +1, pod)
        self.ops.append(Op("reserve", pod, queue, placement, self.action, "", beneficiary))

    def checkpoint(self) -> tuple[int, int]:
        return len(self.ops), self.session.cache.state.checkpoint()

    def rollback_to(self, cp: tuple[int, int]) -> None:
        n_ops, state_cp = cp
        s = self.session
        s.cache.state.rollback(state_cp)
        while len(self.ops) > n_ops:
            op = self.ops.pop()
            if op.kind == "place":
                s.cache.unassume(op.pod.uid)
                s.charge(op.queue, placement_usage(op.placement), -1, op.pod)
            elif op.kind == "reserve":
                s.charge(op.queue, placement_usage(op.placement), -1, op.pod)
            else:
                s.cache.assume(op.pod, op.placement)
                s.charge(op.queue, placement_usage(op.placement), +1, op.pod)

    def rollback(self) -> None:
        self.rollback_to((0, self._state_cp))

    def planned_evictions(self) -> list[Op]:
        return [op for op in self.ops if op.kind == "evict"]

    # ---------------------------------------------------------------------------------- commit
    def commit(self, cluster: Cluster) -> Outcome:
        """Evictions first (their resources are what the placements count on), then binds."""
        s = self.session
        bound: list[PodInfo] = []
        evicted: list[PodInfo] = []
        failed: list[tuple[PodInfo, str]] = []
        refused: list[Op] = []
        for op in self.ops:
            if op.kind != "evict":
                continue
            try:
                cluster.evict(op.pod, action=op.action, message=op.message)
            except EvictError as exc:
                log.warning("eviction of %s refused: %s", op.pod.key, exc)
                refused.append(op)
                failed.append((op.pod, str(exc)))
                continue
            evicted.append(op.pod)
            extra = {"beneficiary": op.beneficiary} if op.beneficiary else {}
            node_name = s.cache.state.node_names[op.placement.node]
            s.event("Evicted", op.action, op.pod, op.message, node=node_name, **extra)
        if refused:
            return self._undo_after_refusal(refused, evicted, failed)
        for op in self.ops:
            if op.kind != "reserve":
                continue
            if failed:  # the move it belongs to did not happen: give the planned place back
                s.cache.state.release(op.placement)
                s.charge(op.queue, placement_usage(op.placement), -1, op.pod)
                continue
            res = Reservation.of(
                op.pod, op.queue, op.placement, op.beneficiary, expires_s=s.now + RESERVATION_TTL_S
            )
            s.cache.reserve(res)
        for op in self.ops:
            if op.kind != "place":
                continue
            node = s.cache.state.nodes[op.placement.node]
            assert node is not None
            assignment = GPUAssignment(
                node=node.name,
                gpus=[AssignedGPU(index=g.slot, uuid=node.uuid(g.slot), milli=g.milli, memory_mib=g.mib)
                      for g in op.placement.gpus],
            )  # fmt: skip
            try:
                if failed:
                    raise BindError("a planned eviction was refused; retrying next cycle")
                cluster.bind(op.pod, assignment)
            except BindError as exc:
                s.cache.unassume(op.pod.uid)
                s.cache.state.release(op.placement)
                s.charge(op.queue, placement_usage(op.placement), -1, op.pod)
                s.set_reason(op.pod, "BindFailed", str(exc))
                failed.append((op.pod, str(exc)))
                continue
            op.pod.node = node.name
            op.pod.phase = PodPhase.BOUND
            bound.append(op.pod)
            gpus = [{"index": g.slot, "milli": g.milli} for g in op.placement.gpus]
            s.event("Scheduled", op.action, op.pod, op.message, node=node.name, gpus=gpus)
        s.cache.state.commit()
        self.ops.clear()
        return Outcome(bound, evicted, failed)

    def _undo_after_refusal(
        self, refused: list[Op], evicted: list[PodInfo], failed: list[tuple[PodInfo, str]]
    ) -> Outcome:
        """An eviction was refused (e.g. by a PodDisruptionBudget): the victims keep running, so nothing
        planned on their resources is made. The planned placements and reservations are given back first,
        and only then do the refused victims take their resources again (both are in the state until then;
        the other way round over-commits the GPU)."""
        s = self.session
        why = "a planned eviction was refused; retrying next cycle"
        for op in self.ops:
            if op.kind == "place":
                s.cache.unassume(op.pod.uid)
                s.cache.state.release(op.placement)
                s.charge(op.queue, placement_usage(op.placement), -1, op.pod)
                s.set_reason(op.pod, "BindFailed", why)
                failed.append((op.pod, why))
            elif op.kind == "reserve":
                s.cache.state.release(op.placement)
                s.charge(op.queue, placement_usage(op.placement), -1, op.pod)
        for op in refused:
            s.cache.state.place(op.placement)
            s.cache.assume(op.pod, op.placement)
            s.charge(op.queue, placement_usage(op.placement), +1, op.pod)
        s.cache.state.commit()
        self.ops.clear()
        return Outcome([], evicted, failed)
