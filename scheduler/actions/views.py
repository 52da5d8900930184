"""What the actions after `allocate` need to know about jobs, as the cycle has changed them so far.

Where a job's members are is `Session.facts` (running, pipelined, still to place): derived from the
ledger, the truth about who holds resources now, whatever the actions placed or evicted since the
session opened.
"""

from __future__ import annotations

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.framework.memo import MemoKey
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job
from scheduler.model.reasons import MAKING_ROOM_HELPS, Reason, Wait
from scheduler.model.types import PodInfo
from scheduler.placement.filters import gpu_need, node_checks
from scheduler.placement.policy import Array
from scheduler.state.demand import PodDemand, demand_for
from scheduler.state.node_arrays import NodeArrays

# Per demand: how many such pods the cluster could hold if it were empty (nodes do not change in a cycle).
EMPTY_CAPACITY: MemoKey[dict[PodDemand, int]] = MemoKey("empty_capacity")


def label(job: Job) -> str:
    """How a job is named to people: namespace/name of its pod group, or of its single pod."""
    return job.key.removeprefix("pod:")


def empty_capacity(state: NodeArrays, d: PodDemand) -> Array:
    """int[N]: how many such pods each node could host if it were empty (selector, taints, model, sizes,
    pod slots and every other resource)."""
    xp = state.xp
    c = node_checks(state, d)
    ok = c.placeable()

    big = 1 << 30
    n = xp.full(state.valid.shape, big, dtype=xp.int64)
    if d.cpu_milli:
        n = xp.minimum(n, state.total_cpu // d.cpu_milli)
    if d.memory_mib:
        n = xp.minimum(n, state.total_mem // d.memory_mib)
    n = xp.minimum(n, state.total_pods)
    for name, amount in d.scalars:
        col = state.scalars.get(name)
        n = xp.minimum(n, state.total_scalar[:, col] // amount) if col is not None else xp.zeros_like(n)
    if d.uses_gpu:
        need_milli, need_mib = gpu_need(state, d)
        fits = state.present & state.healthy & (need_milli <= MILLI_PER_GPU) & (need_mib <= state.total_mib)
        per_gpu = MILLI_PER_GPU // xp.maximum(need_milli, xp.ones_like(need_milli))
        slots = xp.sum(xp.where(fits, per_gpu, xp.zeros_like(per_gpu)), axis=1)
        # Each pod takes num_gpus distinct GPUs: bounded by the slots and by the GPUs that fit one share.
        gpus = xp.sum(xp.astype(fits, xp.int64), axis=1)
        n = xp.minimum(n, xp.where(gpus >= d.num_gpus, slots // d.num_gpus, xp.zeros_like(slots)))
    return xp.where(ok, n, xp.zeros_like(n))


def static_rows(state: NodeArrays, d: PodDemand) -> Array:
    """bool[N]: nodes that could host the pod if they were empty."""
    return empty_capacity(state, d) > 0


def capacity_blocked(session: Session, job: Job, helps: frozenset[Wait] = MAKING_ROOM_HELPS) -> list[PodInfo]:
    """The pending members if every reason they wait for is of a kind in `helps` and the job could run
    on this cluster (else []).

    A job that could not run even on the empty cluster is told so (making room would not help)."""
    f = session.facts(job)
    pods = list(f.pending)
    need = f.place_now
    if not pods or f.incomplete:
        return []
    if any((wait := session.verdicts.wait(p)) is not None and wait not in helps for p in pods):
        return []
    d = demand_for(pods[0])
    known = session.memo.get(EMPTY_CAPACITY, dict)
    if d not in known:
        known[d] = int(session.xp.sum(empty_capacity(session.state, d)))
    fits = known[d]
    if fits < need:
        what = f"{need} pods of {d.describe()} at once" if job.is_gang else d.describe()
        msg = f"{job.key} needs {what}; even empty, this cluster could hold {fits}"
        for p in pods:
            session.verdicts.note(p, msg, otherwise=Reason.UNSCHEDULABLE)
        return []
    return pods


def waiting_jobs(session: Session, helps: frozenset[Wait] = MAKING_ROOM_HELPS) -> list[Job]:
    """Jobs of valid leaf queues with members still pending (not placed this cycle) whose wait the
    caller can end (`helps`, see `capacity_blocked`), in `session.jobs` order."""
    return [
        job for job in session.pending_jobs
        if job.queue in session.tree.nodes and session.tree.leaf_error(job.queue) is None
        and capacity_blocked(session, job, helps)
    ]  # fmt: skip


def place_members(
    session: Session, tx: Transaction, job: Job, pods: list[PodInfo], count: int, *, probe: bool = False
) -> bool:
    """Place `count` of `pods` in the transaction; False (and nothing placed) if they do not all fit.
    `probe`: by the session's cheap placer (a victim search trying a plan), else by its policy."""
    if job.topology is not None:  # inside one domain of its topology (topology_placement.py)
        from scheduler.actions.topology_placement import place_in_topology  # it imports this module

        return place_in_topology(session, tx, job, pods, count, probe=probe, fill=False, explain=False) > 0
    cp = tx.checkpoint()
    placed = 0
    for i, pod in enumerate(pods):
        if placed == count:
            break
        pl = session.probe_place(demand_for(pod)) if probe else session.place(demand_for(pod))
        if pl is None:
            if placed + len(pods) - i - 1 < count:
                break
            continue
        tx.place(pod, job, pl)
        placed += 1
    if placed < count:
        tx.rollback_to(cp)
        return False
    return True
