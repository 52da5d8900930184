"""Consolidation for topology gangs: move preemptible pods out of one domain so that a gang fits in it.

A gang whose required level has no domain with room for it whole (`TopologyUnsatisfied`) may still fit
one if some preemptible pods that move alone (as `consolidate` moves them) ran elsewhere. For the domains
closest to holding the gang (most room first, then the one whose pods are the most expendable), movable
pods on the domain's nodes are taken off, those on the emptiest nodes and the smallest first, until the
gang fits there by count; then the gang is placed inside the domain and every moved pod must get a new
place outside it, or the plan is dropped and the next domain tried (one unit of the action's work budget
each). As in `consolidate`, nothing is evicted unless every moved pod's new place is planned (a
reservation), and no queue loses anything: a moved pod keeps its resources, elsewhere; the gang is
pipelined until the moved pods have terminated.

This is a hook of `consolidate` (which calls `DomainConsolidation.run` for jobs with a topology
constraint), kept apart so the action's own search stays as it is.
"""

from __future__ import annotations

from scheduler.actions.topology_placement import GangFit, Scope, resolve
from scheduler.actions.victims import Victim, candidates, evict
from scheduler.actions.views import label
from scheduler.cache.cluster import Cluster
from scheduler.framework.budget import Meter
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job
from scheduler.model.reasons import Reason
from scheduler.model.types import Placement, PodInfo
from scheduler.state.demand import demand_for

MAX_DOMAINS = 4  # domains tried per gang, those closest to holding it first
MAX_MOVES = 16  # pods moved per plan


class DomainConsolidation:
    def run(
        self, session: Session, cluster: Cluster, job: Job, pods: list[PodInfo], need: int, meter: Meter
    ) -> bool:
        """Make room for `need` of the gang's pending `pods` in one domain of its required level and
        place them; commit, or change nothing. Whether the gang was placed. Each domain tried spends one
        unit of `meter` (scheduler/framework/budget.py)."""
        assert job.topology is not None
        scope = resolve(session.state, session.cache.topologies, job.topology)
        if isinstance(scope, str) or scope.required is None or not pods:
            return False  # invalid (already told), or only a preference: never blocked by topology
        gang = GangFit(session, job, pods, need, scope)
        level = scope.required
        caps = gang.capacities(level)[0]
        size = int(caps.shape[0])
        movable = _movable(session, job)
        by_domain: dict[int, list[Victim]] = {}
        codes = gang.codes(level)
        held = session.ledger
        for v in movable:
            pl = held.placement(v.pods[0].uid)
            if pl is not None and bool(gang.in_topology[pl.node]):
                by_domain.setdefault(int(codes[pl.node]), []).append(v)
        # Most room first; between equals, the one whose pods are the most expendable (KAI's victim order:
        # the lowest priority, then the youngest), then by name.
        order = sorted(
            (c for c in range(size) if c in by_domain),
            key=lambda c: (-int(caps[c]), min(_expendable(v) for v in by_domain[c]),
                           session.state.domains.name(scope.columns[level], c)),
        )[:MAX_DOMAINS]  # fmt: skip
        for code in order:
            if meter.exhausted:
                break
            meter.spend()
            tx = Transaction(session, "consolidate")
            if self._plan(session, tx, job, pods, need, scope, code, by_domain[code]):
                outcome = tx.commit(cluster)
                for p in outcome.bound:
                    session.verdicts.clear(p)
                return True
            tx.rollback()
        _explain(session, pods, scope)
        return False

    def _plan(
        self, session: Session, tx: Transaction, job: Job, pods: list[PodInfo], need: int, scope: Scope,
        code: int, victims: list[Victim],
    ) -> bool:  # fmt: skip
        """Evict from the domain until the gang fits there, place it, re-place the evicted elsewhere;
        then apply that plan with its messages. Leaves the transaction changed (the caller commits or
        rolls back)."""
        level = scope.required
        assert level is not None
        s, held = session.state, session.ledger
        cp = tx.checkpoint()

        def emptiest_first(v: Victim) -> tuple[int, float, tuple[int, float, str]]:
            pl = held.placement(v.pods[0].uid)
            free = sum(s.node_gpu_row(pl.node)) if pl is not None else 0
            return (-free, v.usage.gpu, _expendable(v))

        taken: list[Victim] = []
        for v in sorted(victims, key=emptiest_first)[:MAX_MOVES]:
            evict(tx, [v], "", label(job))
            taken.append(v)
            fit = GangFit(session, job, pods, need, scope)
            if all(
                int(cap[code]) >= n for cap, n in zip(fit.capacities(level), fit.counts.values(), strict=True)
            ):
                break
        else:
            return False
        gang = GangFit(session, job, pods, need, scope)
        if gang.fill(tx, level, code, probe=True, limit=need) < need:
            return False
        outside = ~gang.rows(level, code)
        moves: list[tuple[Victim, Placement]] = []
        for v in sorted(taken, key=lambda v: -v.usage.gpu):  # biggest first: the hardest to fit
            new = session.probe_place(demand_for(v.pods[0]), outside)
            if new is None:
                return False
            tx.reserve(v.pods[0], v.job, new, label(job))
            moves.append((v, new))
        # The plan holds: apply it again with the messages people read (where each pod moves to).
        tx.rollback_to(cp)
        domain = f"{scope.names[level]} {s.domains.name(scope.columns[level], code)}"
        for v, new in moves:
            to = f"{s.node_names[new.node]} GPU {','.join(str(g.slot) for g in new.gpus)}"
            evict(tx, [v], f"moved to {to} to free {domain} for {label(job)} (consolidation)", label(job))
        if GangFit(session, job, pods, need, scope).fill(tx, level, code, probe=False, limit=need) < need:
            return False
        for v, new in moves:
            tx.reserve(v.pods[0], v.job, new, label(job))
        return True


def _expendable(v: Victim) -> tuple[int, float, str]:
    """KAI's victim order: the lowest priority, then the youngest."""
    return (v.job.priority, -v.job.created_s, v.key)


def _movable(session: Session, job: Job) -> list[Victim]:
    """Preemptible pods that move alone, holding GPUs, of other jobs: a job of one pod or a member of an
    elastic gang above its minMember, as `consolidate` moves (a gang is never split to make room)."""
    held = session.ledger
    return [
        v for v in candidates(session)
        if len(v.pods) == 1 and v.job.key != job.key and (pl := held.placement(v.pods[0].uid)) is not None
        and pl.gpus
    ]  # fmt: skip


def _explain(session: Session, pods: list[PodInfo], scope: Scope) -> None:
    level = scope.names[scope.required] if scope.required is not None else "domain"
    note = (
        f"consolidation found no preemptible pods to move out of a {level} (at most {MAX_MOVES}, each to a "
        "new place outside it, planned in advance) that would make room"
    )
    for p in pods:
        prev = session.verdicts.get(p.uid)
        if prev is not None and prev.reason is Reason.TOPOLOGY_UNSATISFIED:
            session.verdicts.note(p, note)
