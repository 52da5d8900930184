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
constraint): it chooses the domains; the victim solver (`solver.py`, `VictimSolver.in_domain`) makes each
domain's plan, with the pods `victims.movable` says may move (a bare pod is never moved).
"""

from __future__ import annotations

from scheduler.actions.solver import MAX_DOMAIN_MOVES, Moves, VictimSolver, expendable
from scheduler.actions.topology_placement import GangFit, Scope, resolve
from scheduler.actions.victims import Victim, movable
from scheduler.cache.cluster import Cluster
from scheduler.framework.budget import Meter
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job
from scheduler.model.reasons import Reason
from scheduler.model.types import PodInfo

MAX_DOMAINS = 4  # domains tried per gang, those closest to holding it first


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
        by_domain: dict[int, list[Victim]] = {}
        codes = gang.codes(level)
        held = session.ledger
        for v in movable(session, job):
            pl = held.placement(v.pods[0].uid)
            if pl is not None and bool(gang.in_topology[pl.node]):
                by_domain.setdefault(int(codes[pl.node]), []).append(v)
        # Most room first; between equals, the one whose pods are the most expendable (KAI's victim order:
        # the lowest priority, then the youngest), then by name.
        order = sorted(
            (c for c in range(size) if c in by_domain),
            key=lambda c: (-int(caps[c]), min(expendable(v) for v in by_domain[c]),
                           session.state.domains.name(scope.columns[level], c)),
        )[:MAX_DOMAINS]  # fmt: skip
        for code in order:
            if meter.exhausted:
                break
            meter.spend()
            tx = Transaction(session, "consolidate")
            solver = VictimSolver(session, tx, job, pods, need, Moves(), "", meter)
            if solver.in_domain(scope, code, by_domain[code]):
                outcome = tx.commit(cluster)
                for p in outcome.bound:
                    session.verdicts.clear(p)
                return True
            tx.rollback()
        _explain(session, pods, scope)
        return False


def _explain(session: Session, pods: list[PodInfo], scope: Scope) -> None:
    level = scope.names[scope.required] if scope.required is not None else "domain"
    note = (
        f"consolidation found no preemptible pods to move out of a {level} (at most {MAX_DOMAIN_MOVES}, each "
        "to a new place outside it, planned in advance) that would make room"
    )
    for p in pods:
        prev = session.verdicts.get(p.uid)
        if prev is not None and prev.reason is Reason.TOPOLOGY_UNSATISFIED:
            session.verdicts.note(p, note)
