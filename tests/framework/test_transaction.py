"""Transaction.commit and rollback as a table: a stub Cluster refuses evictions or fails binds (faults the
simulated cluster does not produce on demand). After every case the ledger, the
arrays, the job index's queue usage and the session's queue figures must agree with each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest

from scheduler.api.assignment import GPUAssignment
from scheduler.api.gpu_request import GPURequest
from scheduler.api.keys import MILLI_PER_GPU
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.cache.cluster import BindError, BindOutcome, BindResult, EvictError, WatchEvent
from scheduler.cache.handoff import HandoffRule
from scheduler.cache.ledger import HoldKind
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job
from scheduler.model.reasons import Reason
from scheduler.model.types import GPUShare, Placement, PodInfo
from scheduler.state.demand import PodDemand, demand_for
from tests.framework.helpers import A100, cluster, node, pod, queue, run


@dataclass
class StubCluster:
    """Refuses the evictions and fails the binds of the pods named; records what it was asked."""

    refuse: frozenset[str] = frozenset()
    fail: frozenset[str] = frozenset()
    evicted: list[str] = field(default_factory=list)
    binds: list[str] = field(default_factory=list)

    def now(self) -> float:
        return 0.0

    def epoch_s(self) -> float:
        return 0.0

    def drain_events(self) -> list[WatchEvent]:
        return []

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> BindResult:
        self.binds.append(pod.name)
        if pod.name in self.fail:
            raise BindError(f"conflict binding {pod.name}")
        return BindResult()

    def bind_outcomes(self) -> list[BindOutcome]:
        return []  # binds are synchronous

    def evict(
        self, pod: PodInfo, *, action: str, message: str, grace_s: float | None = None, force: bool = False
    ) -> None:
        if pod.name in self.refuse:
            raise EvictError("a PodDisruptionBudget forbids it")
        self.evicted.append(pod.name)

    def report_pending(self, pod: PodInfo, reason: str, message: str) -> None:
        return None

    def publish_status(self, queues: Mapping[str, QueueStatus], groups: Mapping[str, PodGroupStatus]) -> None:
        return None

    def warn(self, kind: str, namespace: str | None, name: str, reason: str, message: str) -> None:
        return None


@dataclass
class Scene:
    session: Session
    pods: dict[str, PodInfo]  # by name
    jobs: dict[str, Job]  # by pod name
    where: dict[str, Placement]  # where each running pod is


def scene() -> Scene:
    """Three 2-GPU nodes; queue a runs v1, v2 (preemptible) and w1 (non-preemptible), one GPU each (w1 and
    v1 on n0, v2 on n1); queue b has p1 and p2 pending (one GPU each). A session is open on the settled
    cache."""
    objs = [
        node("n0", A100, 2, 32, 256),
        node("n1", A100, 2, 32, 256),
        node("n2", A100, 2, 32, 256),
        queue("a", None, 4),
        queue("b", None, 4),
    ]
    for name, prio in (("v1", "train"), ("v2", "train"), ("w1", "build")):
        objs.append(pod(name, "a", arrival_s=0, duration_s=1000, gpus=1, cpu="1", priority_class=prio))
    objs += [pod(n, "b", arrival_s=5, duration_s=1000, gpus=1, cpu="1") for n in ("p1", "p2")]
    sim, sched = cluster(objs)
    run(sim, sched, 2)  # v1, v2, w1 bound and their binds echoed
    sim.advance(6.0)
    sched.cache.apply(sim.drain_events())
    session = Session.open(sched.cache, sched.placer, 6.0)
    pods = {p.name: p for p in sched.cache.pods.values()}
    jobs = {p.name: job for job in session.jobs for p in job.members}
    where = {n: pl for n, p in pods.items() if (pl := session.ledger.placement(p.uid)) is not None}
    assert set(where) == {"v1", "v2", "w1"}
    free = session.state.host(session.state.free_milli)
    spare = [(r, j) for r in range(3) for j in range(2) if int(free[r, j]) == MILLI_PER_GPU]
    for i, (r, j) in enumerate(spare):  # the free GPUs, as places named free0, free1...
        where[f"free{i}"] = Placement(r, (GPUShare(j, 1000, 40960),), 1000, where["v1"].memory_mib)
    return Scene(session, pods, jobs, where)


def check_books(session: Session) -> None:
    """Arrays = sum of holdings; queue usage and the session's queue figures = what the holdings say."""
    ledger, state = session.ledger, session.state
    used: dict[tuple[int, int], int] = {}
    held_gpus: dict[str, float] = {}  # per queue, pods and reserved places
    pod_milli: dict[str, int] = {}  # per queue, pods only (the job index's book)
    for h in (*ledger.pods.values(), *ledger.reserved.values()):
        milli = sum(g.milli for g in h.placement.gpus)
        for g in h.placement.gpus:
            used[(h.placement.node, g.slot)] = used.get((h.placement.node, g.slot), 0) + g.milli
        if h.owner is not None:
            held_gpus[h.owner.queue] = held_gpus.get(h.owner.queue, 0.0) + milli / MILLI_PER_GPU
            if h.kind is not HoldKind.RESERVED:  # pods, bound or assumed
                pod_milli[h.owner.queue] = pod_milli.get(h.owner.queue, 0) + milli
    for row in range(state.num_rows):
        for slot in range(state.max_gpus):
            if bool(state.present[row, slot]):
                assert int(state.free_milli[row, slot]) == MILLI_PER_GPU - used.get((row, slot), 0)
    book = {q: u[0] for q, u in session.cache.index.usage.by_queue().items()}
    assert book == {q: m for q, m in pod_milli.items() if m}
    for name in session.tree.nodes:  # (top-level queues only in these tests)
        assert session.tree.nodes[name].allocated.gpu == pytest.approx(held_gpus.get(name, 0.0))


def held(s: Scene) -> set[str]:
    return {n for n, p in s.pods.items() if p.uid in s.session.ledger}


# name: (refused evictions, failed binds, the plan: victims and who takes which place, bound, evicted,
# pipelined: planned with evictions or where a victim still terminates: bound once the victims are gone)
CASES = {
    "evict, then wait on the victim's GPU": (set(), set(), ["v1"], [("p1", "v1")], [], ["v1"], ["p1"]),
    "planned with an eviction, wait for it even on a free GPU": (set(), set(), ["v1"], [("p1", "free0")], [], ["v1"],
                                                                ["p1"]),
    "eviction refused": ({"v1"}, set(), ["v1"], [("p1", "v1")], [], [], []),
    "one of two evictions refused": ({"v2"}, set(), ["v1", "v2"], [("p1", "v1"), ("p2", "v2")], [], ["v1"], []),
    "first bind fails": (set(), {"p1"}, [], [("p1", "free0"), ("p2", "free1")], [], [], []),
    "second bind fails": (set(), {"p2"}, [], [("p1", "free0"), ("p2", "free1")], ["p1"], [], []),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_commit(case: str) -> None:
    refuse, fail, victims, places, bound, evicted, pipelined = CASES[case]
    s = scene()
    check_books(s.session)
    tx = Transaction(s.session, "test")
    for v in victims:
        tx.evict(s.pods[v], f"for {places[0][0]}")
    for name, taken in places:
        tx.place(s.pods[name], s.jobs[name], s.where[taken])
    stub = StubCluster(refuse=frozenset(refuse), fail=frozenset(fail))
    outcome = tx.commit(stub)

    assert [p.name for p in outcome.bound] == bound
    assert [p.name for p in outcome.evicted] == evicted == stub.evicted
    placed = [name for name, _ in places]
    expected = ({"v1", "v2", "w1"} - set(evicted)) | set(bound)
    assert held(s) == expected
    ledger = s.session.ledger
    assert {h.owner.job for h in ledger.releasing.values() if h.owner} == {f"pod:a/{v}" for v in evicted}
    waiting = {r.pod_key: r for r in ledger.reservations().values() if r.uid is not None}
    assert sorted(waiting) == [f"b/{n}" for n in pipelined]  # their places kept, not bound yet
    for name in pipelined:
        assert waiting[f"b/{name}"].waits_for == {s.pods[v].uid for v in evicted}
    for name in set(placed) - set(bound) - set(pipelined):
        assert s.session.reasons[s.pods[name].uid].reason is Reason.BIND_FAILED
    if refuse:
        assert stub.binds == []  # nothing is bound on resources a victim keeps
        for name in placed:
            assert (
                s.session.reasons[s.pods[name].uid].message
                == "a planned eviction was refused; retrying next cycle"
            )
        for v in refuse:
            owner = s.session.ledger.pods[s.pods[v].uid].owner
            assert owner is not None and owner.queue == "a"  # charged to its queue again
    if fail:
        first = placed.index(min(fail))
        assert stub.binds == placed[: first + 1]  # after a failed bind the rest are not tried
        assert s.session.reasons[s.pods[placed[first]].uid].message == f"conflict binding {placed[first]}"
        for name in placed[first + 1 :]:
            assert s.session.reasons[s.pods[name].uid].message.startswith(
                f"not bound: binding b/{placed[first]} failed"
            )
    check_books(s.session)
    s.session.close()


def test_refused_eviction_gives_back_the_reserved_place() -> None:
    s = scene()
    state = s.session.state
    free_before = state.host(state.free_milli).tolist()
    spare = next(
        Placement(r, (GPUShare(j, 1000, 40960),), 1000, s.where["v1"].memory_mib)
        for r in range(2)
        for j in range(2)
        if int(state.free_milli[r, j]) == MILLI_PER_GPU
    )
    tx = Transaction(s.session, "consolidate")
    tx.evict(s.pods["v1"], "moved")
    tx.place(s.pods["p1"], s.jobs["p1"], s.where["v1"])
    tx.reserve(s.pods["v1"], s.jobs["v1"], spare, "b/p1")
    assert s.session.ledger.reserved["a/v1"].kind is HoldKind.RESERVED
    assert s.session.tree.nodes["a"].allocated.gpu == pytest.approx(3.0)  # the moved pod keeps counting
    check_books(s.session)
    outcome = tx.commit(StubCluster(refuse=frozenset({"v1"})))
    assert outcome.bound == [] and s.session.ledger.reserved == {}
    assert state.host(state.free_milli).tolist() == free_before
    check_books(s.session)


def test_rollback_restores_ledger_arrays_and_queue_figures() -> None:
    s = scene()
    session = s.session

    def books() -> tuple[object, ...]:
        return (
            dict(session.ledger.pods),
            session.state.host(session.state.free_milli).tolist(),
            session.cache.index.usage.by_queue(),
            session.cache.index.usage.by_queue(nonpreemptible=True),
            {n: (q.allocated, q.allocated_np) for n, q in session.tree.nodes.items()},
        )

    before = books()
    tx = Transaction(session, "test")
    tx.evict(s.pods["v1"], "x")
    cp = tx.checkpoint()
    tx.place(s.pods["p1"], s.jobs["p1"], s.where["v1"])
    tx.evict(s.pods["w1"], "x")  # non-preemptible: its queue's non-preemptible figure moves too
    tx.place(s.pods["p2"], s.jobs["p2"], s.where["w1"])
    assert session.tree.nodes["b"].allocated.gpu == pytest.approx(2.0)
    assert session.tree.nodes["a"].allocated_np.gpu == pytest.approx(0.0)
    check_books(session)
    tx.rollback_to(cp)
    assert held(s) == {"v2", "w1"}
    check_books(session)
    tx.rollback()
    assert books() == before


def test_a_node_where_a_pod_waits_for_the_device_plugin_takes_no_other_such_pod_this_cycle() -> None:
    """DESIGN.md step 3: once p1 is bound on a node where Tessera's device plugin must serve it, that node
    is masked for the next pod the plugin must serve until the plugin has allocated p1 (cache/handoff.py); a
    whole-GPU pod (NVIDIA's plugin serves those here) and a CPU-only pod are not held back, and a fraction
    that fits nowhere else is told why."""
    s = scene()
    session = s.session
    session.cache.handoff.rule = HandoffRule(whole_gpus=False)
    free = session.state.host(session.state.free_milli)
    alone = next(
        f for f in ("free0", "free1", "free2") if int(free[s.where[f].node].sum()) == 2 * MILLI_PER_GPU
    )
    p1 = replace(s.pods["p1"], request=GPURequest(kind="fraction", num_devices=1, milli=500))
    row = s.where[alone].node
    half = Placement(row, (GPUShare(s.where[alone].gpus[0].slot, 500, 20480),), 1000, 128)
    tx = Transaction(session, "test")
    tx.place(p1, s.jobs["p1"], half)
    tx.commit(StubCluster())
    assert session.cache.handoff.waiting == {p1.uid: row}
    fraction = PodDemand(cpu_milli=100, num_gpus=1, gpu_milli=500)
    excluded = session.excluded(fraction)
    assert excluded is not None and bool(excluded[row]) and int(session.xp.sum(excluded)) == 1
    for pl in (session.place(fraction), session.place_one(fraction)):
        assert pl is not None and pl.node != row  # the next fraction goes to another node...
    assert session.excluded(demand_for(s.pods["p2"])) is None  # ...whole GPUs are not held back here
    assert session.excluded(PodDemand(cpu_milli=100)) is None  # nor pods without GPUs
    for r in range(session.state.num_rows):  # the other nodes take no GPU pod: it fits only where p1 waits
        if r != row:
            session.mask_node(r)
    assert session.place(fraction) is None
    reason, message = session.why_unplaced(fraction)
    assert reason is Reason.WAITING_FOR_DEVICE_PLUGIN
    assert session.state.node_names[row] in message and p1.key in message
    session.close()
