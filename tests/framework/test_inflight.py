"""Asynchronous binding and atomic gang binds as tables, with a stub cluster that accepts binds in flight
and answers them when the test says (the simulated cluster underneath plays the API server's state).

After every step the ledger, the arrays, the job index's queue usage and the session's queue figures must
agree (`check_books`), and no gang is ever left partly bound."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pytest

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ALLOCATED, GPU_FRACTION, POD_GROUP
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.cache.cluster import BindError, BindOutcome, BindResult, WatchEvent
from scheduler.cache.handoff import HandoffRule
from scheduler.cache.ledger import HoldKind
from scheduler.cycle import CycleResult, Scheduler, SchedulerConfig
from scheduler.framework.transaction import Transaction
from scheduler.model.reasons import Reason
from scheduler.model.types import PodInfo, PodPhase
from scheduler.sim.cluster import DEFAULT_GRACE_S, SimCluster
from scheduler.sim.loader import Manifests
from tests.framework.helpers import A100, node, pod, podgroup, queue
from tests.framework.test_transaction import StubCluster, check_books, scene


@dataclass
class AsyncStub:
    """Accepts every bind in flight; `answer(name, error)` carries it out on the simulated cluster (or not)
    and queues its outcome. `refused`: pods whose bind is refused at once."""

    sim: SimCluster
    refused: frozenset[str] = frozenset()
    asked: dict[str, tuple[PodInfo, GPUAssignment]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)  # every bind asked, in order
    outcomes: list[BindOutcome] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)

    def answer(self, name: str, error: str | None = None, *, started: bool = True) -> None:
        """`started=False`: bound, but its kubelet has not started it yet (the watch shows it Pending)."""
        pod_, assignment = self.asked.pop(name)
        if error is None:
            self.sim.bind(pod_, assignment)
            if not started:  # the API server shows it bound, Pending (the kubelet's status comes later)
                obj = copy.deepcopy(self.sim.pods[pod_.key].obj)
                obj["status"] = {"phase": "Pending"}
                self.sim.update_object("Pod", obj)
        self.outcomes.append(BindOutcome(pod_.uid, error))

    # ---- the Cluster interface ---------------------------------------------------------------------------
    def now(self) -> float:
        return self.sim.now()

    def epoch_s(self) -> float:
        return self.sim.epoch_s()

    def drain_events(self) -> list[WatchEvent]:
        return self.sim.drain_events()

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> BindResult:
        self.calls.append(pod.name)
        if pod.name in self.refused:
            raise BindError(f"node {assignment.node} refused it")
        self.asked[pod.name] = (pod, assignment)
        return BindResult(in_flight=True)

    def bind_outcomes(self) -> list[BindOutcome]:
        out, self.outcomes = self.outcomes, []
        return out

    def evict(
        self, pod: PodInfo, *, action: str, message: str, grace_s: float | None = None, force: bool = False
    ) -> None:
        self.evicted.append(pod.name)
        self.sim.evict(pod, action=action, message=message)

    def report_pending(self, pod: PodInfo, reason: str, message: str) -> None:
        self.sim.report_pending(pod, reason, message)

    def publish_status(self, queues: Mapping[str, QueueStatus], groups: Mapping[str, PodGroupStatus]) -> None:
        self.sim.publish_status(queues, groups)

    def warn(self, kind: str, namespace: str | None, name: str, reason: str, message: str) -> None:
        self.sim.warn(kind, namespace, name, reason, message)


def world(
    *pods: dict[str, object],
    groups: tuple[tuple[str, int], ...] = (),
    handoff: HandoffRule | None = None,
    nodes: int = 2,
) -> tuple[AsyncStub, Scheduler]:
    """`nodes` nodes of 2 GPUs, queue q; the pods given (arrived at 0). `handoff`: pods wait for a device
    plugin after their bind (as on Kubernetes)."""
    m = Manifests()
    objs = [*(node(f"n{i}", A100, 2, 32, 256) for i in range(nodes)), queue("q", None, 4)]
    objs += [podgroup(name, "q", "q", minimum) for name, minimum in groups]
    for o in [*objs, *pods]:
        m.objects[str(o["kind"])].append(o)  # type: ignore[arg-type]
    stub = AsyncStub(SimCluster.from_manifests(m))
    return stub, Scheduler(stub, SchedulerConfig(backend="numpy", handoff=handoff))


def cycle(stub: AsyncStub, sched: Scheduler) -> CycleResult:
    stub.sim.advance(stub.sim.now_s + 1.0)
    result = sched.run_cycle()
    assert sched.last_session is not None
    check_books(sched.last_session)
    return result


def held(sched: Scheduler) -> dict[str, HoldKind]:
    names = {p.uid: p.name for p in sched.cache.pods.values()}
    return {names.get(uid, uid): h.kind for uid, h in sched.cache.ledger.pods.items()}


def one_gpu(name: str, group: str | None = None) -> dict[str, object]:
    annotations = {POD_GROUP: group} if group else {}
    return pod(name, "q", arrival_s=0, duration_s=1000, gpus=1, cpu="1", annotations=annotations)


def half(name: str) -> dict[str, object]:
    return pod(name, "q", arrival_s=0, duration_s=1000, cpu="1", annotations={GPU_FRACTION: "0.5"})


def touch(stub: AsyncStub, name: str, **annotations: str) -> None:
    """The watch sends pod `name` again, as the API server has it now (with `annotations` added)."""
    rec = stub.sim.pods[f"q/{name}"]
    obj = copy.deepcopy(rec.obj)
    obj["metadata"]["annotations"] = {**obj["metadata"].get("annotations", {}), **annotations}
    stub.sim.update_object("Pod", obj)


def test_a_version_of_a_pod_older_than_its_bind_in_flight_changes_nothing() -> None:
    """The watch may send a pod again while its bind is in flight (a status write of the cycle before, a
    relabel): that version shows it unbound, but a bound pod never loses its node, so it is older than the
    bind. The pod keeps its place (no second bind, its GPU taken once); the cache alone knows where it goes
    (issue 30 item 4: no adapter shows it bound meanwhile)."""
    stub, sched = world(one_gpu("a"), one_gpu("b"))
    cycle(stub, sched)
    assert set(stub.asked) == {"a", "b"} and held(sched) == {"a": HoldKind.ASSUMED, "b": HoldKind.ASSUMED}
    touch(stub, "a", note="relabelled")
    cycle(stub, sched)
    assert stub.calls == ["a", "b"]  # not placed, nor bound, a second time
    assert held(sched) == {"a": HoldKind.ASSUMED, "b": HoldKind.ASSUMED}
    free = sched.cache.state.host(sched.cache.state.free_milli)
    assert int(free.sum()) == 2000
    stub.answer("a")
    stub.answer("b")
    cycle(stub, sched)
    assert held(sched) == {"a": HoldKind.BOUND, "b": HoldKind.BOUND}


def test_one_pod_per_node_waits_for_the_device_plugin_and_the_next_goes_elsewhere() -> None:
    """DESIGN.md step 3 on the cycle: a fraction bound to a node waits for the device plugin's Allocate
    until the plugin marks it `tessera.dev/gpu-allocated`; meanwhile the next fraction goes to the other
    node, and a third, which would share a GPU where one waits, waits with WaitingForDevicePlugin until a
    mark comes."""
    stub, sched = world(half("f0"), half("f1"), half("f2"), handoff=HandoffRule())
    first = cycle(stub, sched)
    assert len(stub.asked) == 2  # one per node
    nodes = {stub.asked[n][1].node for n in stub.asked}
    assert nodes == {"n0", "n1"}
    (left,) = {"f0", "f1", "f2"} - set(stub.asked)
    waiting = next(p for p in sched.cache.pods.values() if p.name == left)
    assert first.reasons[waiting.uid].reason is Reason.WAITING_FOR_DEVICE_PLUGIN
    bound = sorted(stub.asked)
    for name in bound:
        stub.answer(name, started=False)
    second = cycle(stub, sched)  # bound, but not allocated yet: still one waits on each node
    assert not stub.asked and second.reasons[waiting.uid].reason is Reason.WAITING_FOR_DEVICE_PLUGIN
    touch(stub, bound[0], **{GPU_ALLOCATED: '{"gpus": [{"index": 0}]}'})  # the plugin's mark
    cycle(stub, sched)
    assert set(stub.asked) == {left}  # placed once a node's pod was allocated, where it was
    (again,) = stub.asked.values()
    assert again[1].node == next(p for p in sched.cache.pods.values() if p.name == bound[0]).node


def test_an_accepted_bind_is_assumed_then_confirmed() -> None:
    stub, sched = world(one_gpu("a"))
    first = cycle(stub, sched)
    assert set(stub.asked) == {"a"} and held(sched) == {"a": HoldKind.ASSUMED}
    assert first.bound == 0 and "a" not in {
        p.name for p in sched.cache.pods.values() if not sched.cache.ledger.on_node(p)
    }
    assert sched.cache.index.usage.by_queue()["q"][0] == 1000  # charged while in flight
    stub.answer("a")
    second = cycle(stub, sched)
    assert held(sched) == {"a": HoldKind.BOUND} and len(sched.cache.inflight) == 0
    assert [(e["type"], e["pod"]) for e in second.events] == [("Scheduled", "q/a")]


def test_a_failed_bind_forgets_the_assumption_and_the_next_cycle_places_the_pod_again() -> None:
    stub, sched = world(one_gpu("a"))
    cycle(stub, sched)
    row = next(iter(sched.cache.ledger.pods.values())).placement.node
    stub.answer("a", "etcd timeout")
    result = cycle(stub, sched)
    # Forgotten before the session opened, so this very cycle placed it again (a new bind in flight).
    assert set(stub.asked) == {"a"} and held(sched) == {"a": HoldKind.ASSUMED}
    assert result.reasons == {}
    free = sched.cache.state.host(sched.cache.state.free_milli)
    assert int(free.sum()) == 3000 and int(free[row].sum()) >= 1000  # one GPU taken, once
    stub.answer("a")
    cycle(stub, sched)
    assert held(sched) == {"a": HoldKind.BOUND}


def test_a_failed_bind_is_reported_when_nothing_else_fits() -> None:
    """Four pods, four GPUs: the one whose bind failed waits with its error while the others are bound."""
    stub, sched = world(*(one_gpu(f"p{i}") for i in range(4)))
    cycle(stub, sched)
    assert len(stub.asked) == 4
    for name in ("p0", "p1", "p2"):
        stub.answer(name)
    stub.answer("p3", "conflict: the pod changed")
    stub.refused = frozenset({"p3"})  # and the retry fails at once
    result = cycle(stub, sched)
    p3 = next(p for p in sched.cache.pods.values() if p.name == "p3")
    assert p3.phase is PodPhase.PENDING and p3.node is None and "p3" not in held(sched)
    assert result.reasons[p3.uid].reason is Reason.BIND_FAILED
    assert stub.sim.pods["q/p3"].reason is not None  # told to the user


@pytest.mark.parametrize("order", ["failure first", "success first"])
def test_a_gang_whose_bind_fails_part_way_is_undone_at_once(order: str) -> None:
    stub, sched = world(one_gpu("g0", "g"), one_gpu("g1", "g"), groups=(("g", 2),))
    cycle(stub, sched)
    assert set(stub.asked) == {"g0", "g1"} and set(held(sched).values()) == {HoldKind.ASSUMED}
    if order == "failure first":
        stub.answer("g1", "etcd timeout")
        waiting = cycle(stub, sched)  # g0 still in flight: nothing is decided yet
        assert held(sched) == {"g0": HoldKind.ASSUMED, "g1": HoldKind.ASSUMED} and waiting.evicted == 0
        stub.answer("g0")
    else:
        stub.answer("g0")
        cycle(stub, sched)
        assert held(sched) == {"g0": HoldKind.ASSUMED, "g1": HoldKind.ASSUMED}  # not confirmed alone
        stub.answer("g1", "etcd timeout")
    undone = cycle(stub, sched)
    # g0 was bound: evicted in this cycle (its controller recreates it), and nothing of the gang is held.
    assert stub.evicted == ["g0"] and undone.evicted == 1
    evicted = [e for e in undone.events if e["type"] == "Evicted"]
    assert "bound whole or not at all" in evicted[0]["message"] and "q/g1" in evicted[0]["message"]
    # Never one member alone: either nothing of the gang is held, or both are being bound again.
    assert {n: k for n, k in held(sched).items() if n.startswith("g")} in (
        {}, {"g0": HoldKind.ASSUMED, "g1": HoldKind.ASSUMED})  # fmt: skip
    # The gang (g1 and g0, recreated once its graceful deletion is over) is placed again whole, bound whole.
    for _ in range(2 + int(DEFAULT_GRACE_S)):
        if set(stub.asked) == {"g0", "g1"}:
            break
        cycle(stub, sched)
    assert set(stub.asked) == {"g0", "g1"}
    stub.answer("g0")
    stub.answer("g1")
    done = cycle(stub, sched)
    assert sorted(e["pod"] for e in done.events if e["type"] == "Scheduled") == ["q/g0", "q/g1"]
    assert set(held(sched).values()) == {HoldKind.BOUND} and len(held(sched)) == 2


def test_a_member_refused_at_once_gives_its_place_back_at_once() -> None:
    """g1's bind is refused at once while g0's is in flight: g1's resources are free in this very cycle; g0
    is undone when its answer comes."""
    stub, sched = world(one_gpu("g0", "g"), one_gpu("g1", "g"), groups=(("g", 2),))
    stub.refused = frozenset({"g1"})
    first = cycle(stub, sched)
    assert set(stub.asked) == {"g0"} and held(sched) == {"g0": HoldKind.ASSUMED}
    g1 = next(p for p in sched.cache.pods.values() if p.name == "g1")
    assert g1.phase is PodPhase.PENDING and g1.uid in first.reasons  # (stale-gang eviction names the gang)
    free = sched.cache.state.host(sched.cache.state.free_milli)
    assert int(free.sum()) == 3000  # only g0's GPU is taken
    stub.refused = frozenset()
    stub.answer("g0")
    cycle(stub, sched)
    assert stub.evicted == ["g0"] and "g0" not in held(sched)


def test_a_synchronous_gang_bind_failing_part_way_evicts_the_bound_members() -> None:
    """The same rule where binds are synchronous (the simulated cluster, the benchmark): the transaction
    undoes the members it bound before the failure. (On free GPUs: placements planned with evictions are
    pipelined, bound only once their victims are gone.)"""
    s = scene()
    jobs = dict(s.jobs)
    job = replace(jobs["p1"], is_gang=True, members=(s.pods["p1"], s.pods["p2"]))  # p1 and p2: a gang of two
    jobs["p1"] = jobs["p2"] = job
    tx = Transaction(s.session, "allocate")
    tx.place(s.pods["p1"], job, s.where["free0"])
    tx.place(s.pods["p2"], job, s.where["free1"])
    stub = StubCluster(fail=frozenset({"p2"}))
    outcome = tx.commit(stub)
    assert stub.binds == ["p1", "p2"] and stub.evicted == ["p1"]
    assert outcome.bound == [] and [p.name for p in outcome.evicted] == ["p1"]
    assert {p.name for p, _ in outcome.failed} == {"p2"}
    assert s.pods["p1"].uid not in s.session.ledger and s.pods["p2"].uid not in s.session.ledger
    assert s.session.reasons[s.pods["p2"].uid].reason is Reason.BIND_FAILED
    check_books(s.session)


def test_a_burst_of_fractions_shares_gpus_rather_than_spreading_over_nodes() -> None:
    """Four halves, three empty nodes, one pod per node waiting for the device plugin: the first two start
    a GPU each on two nodes; the other two would start a third GPU, though the two shared GPUs have room
    for both once their pods are allocated: they queue for them (WaitingForDevicePlugin, their places
    reserved), are bound there once the plugin's marks come, and the halves end two to a GPU, as without
    the hand-off (the bench's `packing`)."""
    stub, sched = world(*(half(f"h{i}") for i in range(4)), handoff=HandoffRule(), nodes=3)
    first = cycle(stub, sched)
    assert len(stub.asked) == 2
    for name in [p.name for p in sched.cache.pods.values() if p.name not in stub.asked]:
        uid = next(p.uid for p in sched.cache.pods.values() if p.name == name)
        assert first.reasons[uid].reason is Reason.WAITING_FOR_DEVICE_PLUGIN
        assert "is reserved" in first.reasons[uid].message
    state = sched.cache.state
    charged = state.host(state.free_milli)
    assert sorted(int(charged[r, j]) for r in range(3) for j in range(2)) == [0, 0, 1000, 1000, 1000, 1000]
    for name in sorted(stub.asked):
        stub.answer(name, started=False)
        touch(stub, name, **{GPU_ALLOCATED: '{"gpus": []}'})
    cycle(stub, sched)
    assert len(stub.asked) == 2
    free = state.host(state.free_milli)
    assert sorted(int(free[r, j]) for r in range(3) for j in range(2)) == [0, 0, 1000, 1000, 1000, 1000]


def test_a_fraction_waits_only_for_a_shared_gpu_it_fits_beside() -> None:
    """Two halves that each take 31 of a node's 32 CPUs: the GPU shared on the node where the first waits
    for the device plugin has room for the second, the node's CPUs do not: the second goes to the other
    node at once rather than waiting for a place it could never take."""
    big = [
        pod(f"b{i}", "q", arrival_s=0, duration_s=1000, cpu="31", annotations={GPU_FRACTION: "0.5"})
        for i in range(2)
    ]
    stub, sched = world(*big, handoff=HandoffRule())
    cycle(stub, sched)
    assert sorted(stub.asked) == ["b0", "b1"]
    assert {stub.asked[n][1].node for n in stub.asked} == {"n0", "n1"}
