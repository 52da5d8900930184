"""`consolidate`: place a pod blocked only by fragmentation by moving preemptible pods out of its way.

"Only by fragmentation": the nodes that could host the pod have enough free GPU in total, in pieces too
small. The victim solver (`solver.py`, `VictimSolver.on_nodes`, with the `Moves` validator) makes the plan:
on one such node at a time, the fewest movable pods (`victims.movable`: preemptible single pods a
controller owns, holding GPUs, for which some GPU has room now) whose going makes room for the pod there, by
plain arithmetic on the node's row, smaller sets first (so a plan never moves a pod it does not need to);
then every one of them must get a new place elsewhere (another node, or another GPU of its own), never the
place it has now (that would restart it for nothing), or the set is dropped. The cheapest plan over the
nodes tried (fewest moves, then the lowest priority, then the youngest, as KAI orders its victims) is
applied: evictions, the waiting pod's placement and the moved pods' new places in one transaction. The new places
are reservations (see `scheduler/cache/reservations.py`): the recreated pods are bound there next cycle, and the
waiting pod itself once the moved pods have terminated (pipelined). No queue loses anything: a moved pod
keeps its resources, in a new place. Searches are bounded by work (`scheduler/framework/budget.py`).
"""

from __future__ import annotations

from scheduler.actions.allocate import admissible
from scheduler.actions.domain_consolidation import DomainConsolidation
from scheduler.actions.ordering import jobs_in_order
from scheduler.actions.solver import MAX_MOVES, Moves, VictimSolver
from scheduler.actions.victims import movable
from scheduler.actions.views import capacity_blocked, static_rows, waiting_jobs
from scheduler.api.keys import MILLI_PER_GPU
from scheduler.cache.cluster import Cluster
from scheduler.framework.budget import Meter
from scheduler.framework.memo import MemoKey
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.constraints import PodScope
from scheduler.model.jobs import Job
from scheduler.model.reasons import Reason
from scheduler.model.types import PodInfo
from scheduler.placement.filters import gpu_need
from scheduler.state.demand import PodDemand, demand_for

# Who held what where when consolidation first looked this cycle (see `Consolidate.futile`).
LAYOUT: MemoKey[int] = MemoKey("layout")


class Consolidate:
    name = "consolidate"

    def __init__(self) -> None:
        # Pod shapes no plan was found for, with the fingerprint of the layout tried: a plan that failed
        # on a layout fails on it again, so it is not searched for until something moved.
        self.futile: dict[tuple[PodDemand, PodScope | None], int] = {}
        self.domains = DomainConsolidation()

    def execute(self, session: Session, cluster: Cluster) -> None:
        meter = session.budget.action()
        failed: set[tuple[PodDemand, PodScope | None]] = set()
        for job in jobs_in_order(session, waiting_jobs(session)):
            pods = capacity_blocked(session, job)
            if not pods or admissible(session, job) is not None:
                continue
            count = session.facts(job).place_now
            if job.topology is not None:  # room is made inside one topology domain (domain_consolidation.py)
                if not meter.exhausted:
                    self.domains.run(session, cluster, job, pods, count, session.budget.job(meter))
                continue
            d = demand_for(pods[0])
            free = fragmented_free(session, d, count)
            if free is None:
                continue  # short of capacity, not fragmented: reclaim or preempt may help
            layout = session.memo.get(LAYOUT, session.ledger.fingerprint)  # hashed only when needed
            futile = self.futile.get((d, d.scope)) == layout  # failed before on this very layout
            if (d, d.scope) in failed or futile or meter.exhausted:
                _explain(session, pods, d, free)
                continue
            if not self._plan_job(session, cluster, job, pods, count, session.budget.job(meter)):
                failed.add((d, d.scope))
                _explain(session, pods, d, free)

    def _plan_job(
        self, session: Session, cluster: Cluster, job: Job, pods: list[PodInfo], count: int, meter: Meter
    ) -> bool:
        """Place `count` of the job's pods, making room where needed; commit, or roll back and say so."""
        tx = Transaction(session, "consolidate")
        solver = VictimSolver(session, tx, job, pods, count, Moves(), "", meter)
        placed = 0
        for pod in pods:
            if placed == count:
                break
            pl = session.place(demand_for(pod))
            if pl is not None:
                tx.place(pod, job, pl)
                placed += 1
            elif solver.on_nodes(pod, movable(session, job)):
                placed += 1
            else:
                break
        if placed < count:
            tx.rollback()
            if placed == 0:
                if len(self.futile) > 1024:  # shapes of long gone pods
                    self.futile.clear()
                first = demand_for(pods[0])
                self.futile[(first, first.scope)] = session.memo.get(LAYOUT, session.ledger.fingerprint)
            return False
        outcome = tx.commit(cluster)
        for p in outcome.bound:
            session.verdicts.clear(p)
        return True


def fragmented_free(session: Session, d: PodDemand, count: int) -> float | None:
    """Free GPUs (in total, on nodes that could host the pod) when they would suffice, else None."""
    if not d.uses_gpu:
        return None
    xp, s = session.xp, session.state
    rows = static_rows(s, d) & (s.free_cpu >= d.cpu_milli) & (s.free_mem >= d.memory_mib)
    need_milli, _ = gpu_need(s, d)
    usable = s.present & s.healthy & rows[:, None]
    free = int(xp.sum(xp.where(usable, xp.astype(s.free_milli, xp.int64), xp.zeros_like(need_milli))))
    each = int(xp.min(xp.where(usable, need_milli, xp.full(need_milli.shape, MILLI_PER_GPU, dtype=xp.int64))))
    if free < count * d.num_gpus * each:
        return None
    return free / MILLI_PER_GPU


def _explain(session: Session, pods: list[PodInfo], d: PodDemand, free: float) -> None:
    msg = (
        f"fragmentation: {free:g} GPUs are free on nodes that match, but in pieces: no node has room for "
        f"{d.describe()}; consolidation found no preemptible pods it could move (at most {MAX_MOVES}, "
        "each to a new place planned in advance)"
    )
    for p in pods:
        session.set_reason(p, Reason.FRAGMENTED, msg)
