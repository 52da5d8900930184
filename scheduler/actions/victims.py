"""Victims: the units a waiting job may evict, in the order they are taken (the solver, `solver.py`,
chooses among them).

Victims are units of running preemptible jobs: a gang whole (never in part), or one member of an elastic
gang above its minMember. They are ordered as KAI Scheduler orders its victims: the queue most over its
share first (queues interleaved as victims are taken, `victim_order`), inside a queue the lowest priority,
then elastic extras, then the youngest (`Victim.sort_key`). The list is built once per cycle and shared by
`reclaim`, `preempt` and `consolidate`; `evict` takes a chosen set in the caller's transaction.

`movable` is the one rule for the pods an action may *move* (consolidation, topology consolidation): a move
is an eviction that the pod's controller undoes by recreating it, so only pods a controller owns move.
Reclaim and preempt evict; they take bare pods as victims as KAI does, and plan no place for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.framework.memo import MemoKey
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job
from scheduler.model.resources import Resources, placement_usage
from scheduler.model.types import PodInfo


@dataclass(frozen=True)
class Victim:
    job: Job
    pods: tuple[PodInfo, ...]
    usage: Resources
    nodes: frozenset[int]
    elastic: bool = False  # one member of an elastic gang above its minMember (not the whole gang)
    order: int = 0  # an elastic member's turn inside its gang (0 goes first: the youngest, the last named)

    def sort_key(self) -> tuple[int, int, float, int, int, str]:
        return (
            self.job.priority,
            0 if self.elastic else 1,
            -self.job.created_s,
            self.order,
            len(self.pods),
            self.key,
        )

    @property
    def key(self) -> str:
        return f"{self.job.key}#{self.pods[0].uid}" if self.elastic else self.job.key


# The running preemptible jobs as the first action that asked found them (see `candidates`).
VICTIMS: MemoKey[list[Victim]] = MemoKey("victims")


# The same list, less the units evicted since, as of a state version (asked again and again while
# nothing is evicted).
LIVE_VICTIMS: MemoKey[tuple[int, int, list[Victim]]] = MemoKey("live_victims")


def candidates(session: Session) -> list[Victim]:
    """Victim units of running preemptible jobs, most expendable first (inside a queue).

    Computed once per cycle; units evicted since then are left out. Pods placed later in the cycle are
    not candidates in it (evicting what was just bound would only churn)."""
    held = session.ledger.pods
    everyone = session.memo.get(VICTIMS, lambda: _running_preemptible(session))
    key = (session.state.version, len(held))
    live = session.memo.peek(LIVE_VICTIMS)
    if live is None or live[:2] != key:
        live = (*key, [v for v in everyone if all(p.uid in held for p in v.pods)])
        session.memo.put(LIVE_VICTIMS, live)
    return live[2]


def movable(session: Session, job: Job) -> list[Victim]:
    """Victims that may move out of `job`'s way: preemptible pods that move alone (a job of one pod, a
    PodGroup of one included, or a member of an elastic gang above its minMember: a gang is never split),
    of another job, holding GPUs, and owned by a controller (a bare pod evicted is simply gone)."""
    held = session.ledger.pods
    return [
        v for v in candidates(session)
        if len(v.pods) == 1 and v.job.key != job.key and v.pods[0].controlled
        and held[v.pods[0].uid].placement.gpus
    ]  # fmt: skip


def _unit(session: Session, job: Job, pods: list[PodInfo], *, elastic: bool, order: int = 0) -> Victim:
    held = session.ledger.pods
    places = [held[p.uid].placement for p in pods]
    usage = (
        placement_usage(places[0])
        if len(places) == 1
        else Resources(
            gpu=sum(g.milli for pl in places for g in pl.gpus) / MILLI_PER_GPU,
            cpu=float(sum(pl.cpu_milli for pl in places)),
            memory=float(sum(pl.memory_mib for pl in places)),
        )
    )
    nodes = frozenset(pl.node for pl in places)
    return Victim(job, tuple(pods), usage, nodes, elastic, order)


def _running_preemptible(session: Session) -> list[Victim]:
    out: list[Victim] = []
    refused = _refused(session)
    for job in session.jobs:
        if not job.preemptible:
            continue
        pods = list(session.facts(job).running)
        if not pods or any(p.uid in refused for p in pods):
            continue  # a budget refused evicting one of its pods lately (`--disruption-budgets respect`)
        extra = len(pods) + job.succeeded - job.min_member if job.is_gang else 0
        if extra > 0:  # elastic: members above minMember may go one by one, the youngest first
            newest = sorted(pods, key=lambda p: (p.created_s, _natural(p.name)), reverse=True)
            out.extend(_unit(session, job, [p], elastic=True, order=i) for i, p in enumerate(newest[:extra]))
        out.append(_unit(session, job, pods, elastic=False))
    out.sort(key=Victim.sort_key)
    return out


def _refused(session: Session) -> set[str]:
    """Pods whose eviction a disruption budget refused lately: no victims until REFUSED_FOR_S has passed
    (scheduler/framework/eviction.py), so a search picks other victims."""
    refused = session.cache.refused
    for uid in [u for u, until in refused.items() if until <= session.now]:
        del refused[uid]
    return set(refused)


def _natural(name: str) -> tuple[str, int]:
    """A pod name in the order its controller made it: worker-10 after worker-9."""
    stem, _, index = name.rpartition("-")
    return (stem, int(index)) if index.isdigit() else (name, -1)


def victim_order(session: Session, victims: list[Victim]) -> list[Victim]:
    """KAI's victim order across queues: repeatedly the next victim of the queue most over its share,
    counting what was taken from it so far (so queues are interleaved as they come down)."""
    by_queue: dict[str, list[Victim]] = {}
    for v in victims:
        by_queue.setdefault(v.job.queue, []).append(v)
    if len(by_queue) <= 1:
        return list(victims)
    tree = session.tree
    taken = {q: 0.0 for q in by_queue}

    def share(q: str) -> tuple[float, int, str, str]:
        """The queue served last goes first: most over its share, then the lower priority, then the newer."""
        node = tree.nodes.get(q)
        if node is None:
            return (float("inf"), 0, "", q)
        fair = node.fair_share.gpu
        used = node.allocated.gpu - taken[q]
        ratio = used / fair if fair > 1e-9 else (float("inf") if used > 1e-9 else 0.0)
        return (ratio, -node.spec.priority, node.created, q)

    out: list[Victim] = []
    while by_queue:
        q = max(by_queue, key=share)
        v = by_queue[q].pop(0)
        out.append(v)
        taken[q] += v.usage.gpu
        if not by_queue[q]:
            del by_queue[q]
    return out


def evict(tx: Transaction, victims: list[Victim], message: str, beneficiary: str) -> None:
    """Evict the victims' pods (a pod shared by two units, an elastic member and its whole gang, once)."""
    seen: set[str] = set()
    for v in victims:
        for p in v.pods:
            if p.uid not in seen:
                seen.add(p.uid)
                tx.evict(p, message, beneficiary)


def pod_count(victims: list[Victim]) -> int:
    return len({p.uid for v in victims for p in v.pods})
