"""A transaction over the ledger (KAI's "statement"): actions try placements and evictions on the
snapshot, then either commit them to the cluster or roll every one of them back.

Each step is one ledger operation (arrays, holdings and queue usage together) plus an `Op` that says what
to tell the cluster at commit. Nothing reaches the cluster before `commit`: a gang that cannot be placed
whole, or a reclaim whose beneficiary still does not fit, leaves no trace (`rollback` is the ledger's).

A third kind of step, `reserve`, plans where an evicted pod goes next (consolidation moves pods). The
Cluster interface has no "move": the victim is evicted and its controller recreates it, so the planned
place is a reservation in the ledger (it keeps its resources charged) and the `bind_reserved` action binds
the recreated pod there next cycle (see `scheduler/cache/reservations.py`).

An evicted pod does not vanish: it terminates (its grace period) and holds its GPU until it is gone. So
an eviction makes the victim `RELEASING` in the ledger, and at commit a placement that needs what releasing
pods still occupy is not bound: it is pipelined, its place reserved until they are gone (a gang's members
all together, as KAI Scheduler does); `bind_reserved` binds it then.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from enum import StrEnum

from scheduler.api.assignment import Admission, AssignedGPU, GPUAssignment
from scheduler.cache.cluster import BindError, Cluster, EvictError
from scheduler.cache.inflight import Answer, BindUnit, Member, resolve
from scheduler.cache.ledger import Owner
from scheduler.cache.reservations import RESERVATION_TTL_S, Reservation
from scheduler.framework.eviction import REFUSED_FOR_S
from scheduler.framework.session import Session
from scheduler.model.jobs import Job
from scheduler.model.reasons import Reason
from scheduler.model.resources import Resources, placement_usage
from scheduler.model.types import Placement, PodInfo

log = logging.getLogger(__name__)
DEFAULT_GRACE_S = 30.0  # Kubernetes' terminationGracePeriodSeconds default


class OpKind(StrEnum):
    PLACE = "place"  # bind the pod there at commit
    EVICT = "evict"  # evict the pod at commit (before any bind: the binds count on its resources)
    RESERVE = "reserve"  # keep the place for the evicted pod's replacement


@dataclass(frozen=True)
class Op:
    kind: OpKind
    pod: PodInfo
    placement: Placement
    owner: Owner | None  # whom the holding was charged to
    action: str
    message: str = ""
    beneficiary: str = ""  # the job an eviction or reservation makes room for
    priority: int = 0  # a placement's: its job's priority, recorded in the assignment (`Admission`)


@dataclass(frozen=True)
class Outcome:
    bound: list[PodInfo]  # bound, or being bound (in flight: the cluster binds asynchronously)
    evicted: list[PodInfo]  # the planned victims, and members of a gang undone after a failed bind
    failed: list[tuple[PodInfo, str]]


def owner_of(job: Job) -> Owner:
    return Owner(job.queue, job.key, not job.preemptible)


def _over_limit(session: Session) -> dict[str, set[str]]:
    """Per queue whose limit (or an ancestor's) the releasing pods under it would break, counted with what
    the plan holds there now: the releasing pods its placements must wait for."""
    tree, releasing = session.tree, session.ledger.releasing
    under: dict[str, tuple[Resources, set[str]]] = {}  # queue -> releasing usage and pods in its subtree
    for uid, held in releasing.items():
        if held.owner is None or held.owner.queue not in tree.nodes:
            continue
        usage = placement_usage(held.placement)
        for node in tree.ancestors(held.owner.queue):
            total, uids = under.get(node.name, (Resources(), set()))
            under[node.name] = (total + usage, uids | {uid})
    broken = {
        name: uids
        for name, (usage, uids) in under.items()
        if tree.limit_exceeded(name, usage, only_self=True) is not None
    }
    if not broken:
        return {}
    return {
        leaf: set().union(*(broken[n.name] for n in tree.ancestors(leaf) if n.name in broken))
        for leaf in tree.nodes
        if any(n.name in broken for n in tree.ancestors(leaf))
    }


def _admission(op: Op) -> Admission | None:
    """What the pod's job is bound with (its queue, job, priority and preemptibility), recorded in its
    assignment so that it stays so while it runs, across restarts (`JobIndex` pins it)."""
    if op.owner is None:
        return None
    return Admission(
        queue=op.owner.queue, job=op.owner.job, priority=op.priority, preemptible=not op.owner.nonpreemptible
    )


def pod_names(session: Session, uids: frozenset[str]) -> list[str]:
    """The pods of `uids` as people name them (namespace/name), sorted."""
    pods = session.cache.pods
    return sorted(pods[u].key if u in pods else u for u in uids)


def pipelined_reason(node: str | None, names: list[str]) -> str:
    """Why a pipelined pod waits: where its place is, and the pods still terminating there (evicted for it,
    or deleted by someone). Written when it is pipelined and, in the same words, every cycle it still
    waits (`bind_reserved`), so that people are told once."""
    verb = "has" if len(names) == 1 else "have"
    return f"its place on {node} is reserved; it is bound once {', '.join(names)} {verb} terminated"


def handoff_reason(session: Session, placement: Placement) -> tuple[Reason, str]:
    """Why a pod queued behind the device plugin waits (`Transaction.queue_behind`): written when it is
    queued and, in the same words, every cycle it still waits (`bind_reserved`)."""
    row = placement.node
    node = session.state.node_names[row]
    waiting = next((uid for uid, r in session.cache.handoff.waiting.items() if r == row), None)
    pod = session.cache.pods.get(waiting) if waiting is not None else None
    gpus = ", ".join(str(g.slot) for g in placement.gpus)
    return Reason.WAITING_FOR_DEVICE_PLUGIN, (
        f"its place on {node} (GPU {gpus}, shared) is reserved: the device plugin has yet to allocate "
        f"{pod.key if pod is not None else 'the pod bound there before it'} (one such pod per node), and "
        "every other place would start an unused GPU; it is bound once the plugin has"
    )


class Transaction:
    def __init__(self, session: Session, action: str) -> None:
        self.session = session
        self.ledger = session.ledger
        self.action = action
        self.ops: list[Op] = []
        self._start = self.ledger.begin()

    # ---------------------------------------------------------------------------------- simulate
    def place(self, pod: PodInfo, job: Job, placement: Placement, message: str = "") -> None:
        owner = owner_of(job)
        self.ledger.hold(pod.uid, placement, owner)
        self.ops.append(Op(OpKind.PLACE, pod, placement, owner, self.action, message, priority=job.priority))

    def evict(self, pod: PodInfo, message: str, beneficiary: str = "") -> None:
        held = self.ledger.start_releasing(pod.uid)
        if held is None:
            raise ValueError(f"pod {pod.key} holds nothing to evict")
        self.ops.append(Op(OpKind.EVICT, pod, held.placement, held.owner, self.action, message, beneficiary))

    def reserve(self, pod: PodInfo, job: Job, placement: Placement, beneficiary: str) -> None:
        """Plan the new place of a pod evicted in this transaction (it is recreated and bound there): kept
        while the pod terminates (its grace period) and its replacement is created, and a little longer."""
        expires = self.session.now + self.session.eviction.terminates_within(pod) + RESERVATION_TTL_S
        self.ledger.reserve(Reservation.of(pod, job.queue, placement, beneficiary, expires_s=expires))
        self.ops.append(Op(OpKind.RESERVE, pod, placement, owner_of(job), self.action, "", beneficiary))

    def queue_behind(self, pod: PodInfo, job: Job, placement: Placement) -> None:
        """Keep `placement` for `pod` on a node where a pod bound by us waits for the device plugin
        (`Session.behind_handoff`): charged now, so that nothing else takes it, and bound by `bind_reserved`
        once no pod waits there. Nothing to tell the cluster at commit."""
        s = self.session
        expires = s.now + RESERVATION_TTL_S
        self.ledger.reserve(Reservation.behind_handoff(pod, job.queue, placement, job.key, expires_s=expires,
                                                       action=self.action))  # fmt: skip
        s.pipelined.add(pod.uid)
        s.set_reason(pod, *handoff_reason(s, placement))

    def checkpoint(self) -> tuple[int, int]:
        return len(self.ops), self.ledger.checkpoint()

    def rollback_to(self, cp: tuple[int, int]) -> None:
        n_ops, ledger_cp = cp
        self.ledger.rollback(ledger_cp)
        del self.ops[n_ops:]

    def rollback(self) -> None:
        self.rollback_to((0, self._start))
        self.ledger.commit()  # nothing left to undo: close the journal

    def planned_evictions(self) -> list[Op]:
        return [op for op in self.ops if op.kind is OpKind.EVICT]

    # ---------------------------------------------------------------------------------- commit
    def commit(self, cluster: Cluster) -> Outcome:
        """Evictions first (their resources are what the placements count on), then binds."""
        s = self.session
        evicted: list[PodInfo] = []
        failed: list[tuple[PodInfo, str]] = []
        refused: list[Op] = []
        policy = s.eviction
        for op in self.planned_evictions():
            try:
                cluster.evict(op.pod, action=op.action, message=op.message, grace_s=policy.grace_for(op.pod),
                              force=policy.budgets == "delete")  # fmt: skip
            except EvictError as exc:
                log.warning("eviction of %s refused: %s", op.pod.key, exc)
                refused.append(op)
                failed.append((op.pod, str(exc)))
                s.cache.refused[op.pod.uid] = s.now + REFUSED_FOR_S  # the next searches pick others
                continue
            evicted.append(op.pod)
            extra = {"beneficiary": op.beneficiary} if op.beneficiary else {}
            node_name = s.state.node_names[op.placement.node]
            s.event("Evicted", op.action, op.pod, op.message, node=node_name, **extra)
        if refused:
            self._give_back(refused, failed)
            return Outcome([], evicted, failed)
        self._pipeline()
        bound = self._bind(cluster, failed, evicted)
        self.ledger.commit()
        self.ops.clear()
        return Outcome(bound, evicted, failed)

    def _pipeline(self) -> None:
        """Placements that need what releasing pods still occupy, and every placement planned together with
        evictions, become reservations that wait for them (a job's placements all together: a gang is bound
        whole). Waiting for the victims of its own transaction keeps queue limits and quotas true even while
        they terminate (their queue no longer counts them); reserved places of moved pods learn what they
        wait for too. A pod being deleted still counts toward its queue's limit until it is gone: a
        placement that its queue's limit allows only without them waits for them too (a tenant deleting
        pods with a long grace period and creating new ones never runs more than the limit at once)."""
        s, ledger = self.session, self.ledger
        if not ledger.releasing:
            return
        victims = {op.pod.uid for op in self.ops if op.kind is OpKind.EVICT} & ledger.releasing.keys()
        over = _over_limit(s)
        waits: dict[str, set[str]] = {}  # job -> releasing uids
        for op in self.ops:
            if op.kind is OpKind.PLACE and op.owner is not None:
                need = (
                    ledger.physical_shortfall(op.placement).waits_for
                    | victims
                    | over.get(op.owner.queue, set())
                )
                if need:
                    waits.setdefault(op.owner.job, set()).update(need)
        kept: list[Op] = []
        for op in self.ops:
            job = op.owner.job if op.owner is not None else ""
            if op.kind is OpKind.PLACE and job in waits:
                waiting = frozenset(waits[job])
                ledger.release(op.pod.uid)
                assert op.owner is not None
                ledger.reserve(Reservation.pipelined(
                    op.pod, op.owner.queue, op.placement, job, waits_for=waiting,
                    expires_s=self._expiry(waiting), action=op.action,
                ))  # fmt: skip
                s.pipelined.add(op.pod.uid)
                node = s.state.node_names[op.placement.node]
                names = pod_names(s, waiting)
                s.event("Pipelined", op.action, op.pod, op.message, node=node, waits_for=names)
                s.set_reason(op.pod, Reason.PIPELINED, pipelined_reason(node, names))
                continue
            if op.kind is OpKind.RESERVE:
                res = ledger.reservations().get(op.pod.key)
                blocked = ledger.physical_shortfall(op.placement).waits_for
                if res is not None and blocked:
                    ledger.reserve(replace(res, waits_for=blocked, expires_s=self._expiry(blocked)))
            kept.append(op)
        self.ops = kept

    def _expiry(self, waiting: frozenset[str]) -> float:
        """A pipelined place is kept while its victims may still be terminating, and a little longer."""
        pods, policy = self.session.cache.pods, self.session.eviction
        ours = {op.pod.uid for op in self.ops if op.kind is OpKind.EVICT}  # evicted with a capped grace
        grace = max(
            (
                policy.terminates_within(pods[u]) if u in ours else pods[u].grace_s
                for u in waiting
                if u in pods
            ),
            default=DEFAULT_GRACE_S,
        )
        return self.session.now + grace + RESERVATION_TTL_S

    def _bind(
        self, cluster: Cluster, failed: list[tuple[PodInfo, str]], evicted: list[PodInfo]
    ) -> list[PodInfo]:
        """Bind the placed pods in order, each job's pods as one `BindUnit` (a gang is bound whole or not at
        all: see `scheduler/cache/inflight.py`). After a bind fails at once the rest of the transaction's pods are
        not tried (they were planned together): they go back to pending for the next cycle. Pods whose bind
        is in flight stay ASSUMED until the cluster reports their outcome. Returns the pods placed (bound, or
        being bound)."""
        s = self.session
        units: dict[str, BindUnit] = {}
        first_failure: str | None = None
        for op in self.ops:
            if op.kind is not OpKind.PLACE:
                continue
            node = s.state.nodes[op.placement.node]
            assert node is not None
            job = op.owner.job if op.owner is not None else f"pod:{op.pod.key}"
            unit = units.setdefault(job, BindUnit(op.action, job, []))
            member = Member(op.pod, op.placement, node.name, op.message)
            unit.members.append(member)
            if first_failure is not None:
                member.answer, member.error = Answer.NOT_TRIED, first_failure
                continue
            assignment = GPUAssignment(
                node=node.name,
                gpus=[AssignedGPU(index=g.slot, uuid=node.uuid(g.slot), milli=g.milli, memory_mib=g.mib)
                      for g in op.placement.gpus],
                admitted=_admission(op),
            )  # fmt: skip
            try:
                result = cluster.bind(op.pod, assignment)
            except BindError as exc:
                member.answer, member.error = Answer.FAILED, str(exc)
                first_failure = f"not bound: binding {op.pod.key} failed ({exc}); retrying next cycle"
                continue
            self.ledger.bound(op.pod.uid)  # its place is the ledger's fact until the watch shows the bind
            if result.in_flight:
                self.ledger.assume(op.pod.uid)
            else:
                member.answer = Answer.BOUND
            s.cache.handoff.refresh(op.pod)  # it may now wait for the device plugin on its node
        placed: list[PodInfo] = []
        for unit in units.values():
            if not unit.answered:
                s.cache.inflight.add(unit)  # resolved when the cluster reports the binds in flight
                for m in unit.members:
                    if m.answer is Answer.IN_FLIGHT:
                        placed.append(m.pod)
                    elif m.answer is not Answer.BOUND:  # failed at once: given back now, not at the end
                        self.ledger.release(m.pod.uid)
                        s.set_reason(m.pod, Reason.BIND_FAILED, m.error)
                        failed.append((m.pod, m.error))
                continue
            done = resolve(unit, s.cache, cluster, s)
            placed += done.bound
            evicted += done.evicted
            failed += done.failed
        return placed

    def _give_back(self, refused: list[Op], failed: list[tuple[PodInfo, str]]) -> None:
        """An eviction was refused (e.g. by a PodDisruptionBudget): the victims keep running, so nothing
        planned on their resources is made. The planned placements and reservations are given back first,
        and only then do the refused victims take their resources again (both are in the state until then;
        the other way round over-commits the GPU)."""
        why = "a planned eviction was refused; retrying next cycle"
        for op in self.ops:
            if op.kind is OpKind.PLACE:
                self.ledger.release(op.pod.uid)
                self.session.set_reason(op.pod, Reason.BIND_FAILED, why)
                failed.append((op.pod, why))
            elif op.kind is OpKind.RESERVE:
                self.ledger.unreserve(op.pod.key)
        for op in refused:
            self.ledger.stop_releasing(op.pod.uid)
        self.ledger.commit()
        self.ops.clear()
