"""A burst of fractions under the device plugin's hand-off (DESIGN.md step 3) ends packed as the policy packs
it without the hand-off, whatever order the plugin's marks arrive in: at most one pod per node waits for
`Allocate`, the others go to the best other node or, where every other place would start an unused GPU,
queue behind the plugin for a GPU in use (`Session.fill_first`, `Transaction.queue_behind`).

The marks are delivered in adversarial orders by the test (the cluster is the simulator behind a stub that
holds every bind in flight until the test answers it, `test_inflight.AsyncStub`)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from scheduler.api.keys import GPU_ALLOCATED, MILLI_PER_GPU
from scheduler.cache.handoff import HandoffRule
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.reasons import Reason
from tests.framework.test_inflight import AsyncStub, cycle, half, touch, world

# Which of the pods waiting for the plugin (bound, not marked; in bind order) it marks before the next cycle.
Order = Callable[[list[str], random.Random], list[str]]

ORDERS: dict[str, Order] = {
    "all at once": lambda waiting, _: list(waiting),
    "oldest only": lambda waiting, _: waiting[:1],
    "newest only": lambda waiting, _: waiting[-1:],
    "newest first, half": lambda waiting, _: waiting[::-1][: max(1, len(waiting) // 2)],
    "random one": lambda waiting, rng: [rng.choice(waiting)],
    "random subset": lambda waiting, rng: [w for w in waiting if rng.random() < 0.5] or [rng.choice(waiting)],
}


def drain(stub: AsyncStub, sched: Scheduler, order: Order, seed: int, pods: int) -> list[int]:
    """Cycles until every pod is bound and marked; the plugin marks as `order` says. Checks after every
    cycle that no node has two of our pods bound (or being bound) and not marked. The GPUs' used milli."""
    rng = random.Random(seed)
    waiting: list[str] = []  # bound, not marked yet, in bind order
    marked: set[str] = set()
    for _ in range(20 * pods):
        cycle(stub, sched)
        node_of = {name: a.node for name, (_, a) in stub.asked.items()}
        for name in sorted(stub.asked):
            stub.answer(name, started=False)
            waiting.append(name)
        pods_by_name = {p.name: p for p in sched.cache.pods.values()}
        per_node = Counter(node_of.get(n) or pods_by_name[n].node for n in waiting)
        assert max(per_node.values(), default=0) <= 1, per_node
        if len(marked) == pods:
            break
        if waiting:
            for name in order(waiting, rng):
                touch(stub, name, **{GPU_ALLOCATED: '{"gpus": []}'})
                waiting.remove(name)
                marked.add(name)
    assert len(marked) == pods, f"{pods - len(marked)} pods never bound"
    state = sched.cache.state
    free = state.host(state.free_milli)
    return [MILLI_PER_GPU - int(free[r, j]) for r in range(len(state.nodes)) for j in range(2)]


@pytest.mark.parametrize("order", sorted(ORDERS))
@pytest.mark.parametrize(("pods", "nodes"), [(8, 3), (11, 4), (12, 6)])
def test_halves_end_two_to_a_gpu_whatever_order_the_marks_arrive_in(
    order: str, pods: int, nodes: int
) -> None:
    for seed in range(4):
        stub, sched = world(*(half(f"h{i:02d}") for i in range(pods)), handoff=HandoffRule(), nodes=nodes)
        used = [u for u in drain(stub, sched, ORDERS[order], seed, pods) if u]
        assert len(used) == (pods + 1) // 2, (seed, used)  # as many GPUs as without the hand-off
        assert sum(1 for u in used if u < MILLI_PER_GPU) == pods % 2, (seed, used)  # at most one half used


def test_a_fraction_queued_behind_the_plugin_is_bound_as_soon_as_its_node_is_free() -> None:
    """Two halves, two nodes: the first starts a GPU on n0 and waits for the plugin there; the second
    would start a GPU on n1, so it queues for the GPU it shares on n0 (its place charged, the reason
    said), and is bound there in the cycle the plugin's mark arrives, before anything else."""
    stub, sched = world(half("a"), half("b"), handoff=HandoffRule())
    first = cycle(stub, sched)
    assert sorted(stub.asked) == ["a"]
    b = next(p for p in sched.cache.pods.values() if p.name == "b")
    why = first.reasons[b.uid]
    assert (
        why.reason is Reason.WAITING_FOR_DEVICE_PLUGIN and "q/a" in why.message and "reserved" in why.message
    )
    state = sched.cache.state
    assert int(state.host(state.free_milli)[0, 0]) == 0  # b's half is charged where it queued
    assert sched.queued_behind_plugin()  # (a mark ends the pause between cycles: kube/runner.py)
    stub.answer("a", started=False)
    again = cycle(stub, sched)
    assert not stub.asked and again.reasons[b.uid].reason is Reason.WAITING_FOR_DEVICE_PLUGIN
    touch(stub, "a", **{GPU_ALLOCATED: '{"gpus": []}'})
    cycle(stub, sched)
    assert sorted(stub.asked) == ["b"] and stub.asked["b"][1].node == "n0"
    assert [g.index for g in stub.asked["b"][1].gpus] == [0]
    assert not sched.queued_behind_plugin()
    stub.answer("b", started=False)
    told = cycle(stub, sched)
    (scheduled,) = [e for e in told.events if e["type"] == "Scheduled"]
    assert scheduled["pod"] == "q/b" and "device plugin has allocated" in scheduled["message"]


def restarted(stub: AsyncStub) -> Scheduler:
    """A scheduler started afresh over the same cluster (a restart, a failover): every object as ADDED.
    What the old one kept in memory alone (a fraction queued behind the plugin is only a pending pod
    on the API server) is gone; binds of the old one not answered yet are dropped with it."""
    stub.asked.clear()
    sched = Scheduler(stub, SchedulerConfig(backend="numpy", handoff=HandoffRule()))
    stub.sim.relist()
    return sched


def gpu_used(sched: Scheduler) -> list[list[int]]:
    state = sched.cache.state
    free = state.host(state.free_milli)
    return [[MILLI_PER_GPU - int(free[r, j]) for j in range(2)] for r in range(len(state.nodes))]


def test_a_restart_while_a_fraction_is_queued_behind_the_plugin_queues_it_again() -> None:
    """The old scheduler bound a (awaiting Allocate on n0) and queued b behind it; it dies. The new one
    sees a bound with its assignment and no mark, so n0 still has a pod awaiting the plugin: b is queued
    behind it again (charged on a's GPU, not bound, not started on an unused GPU), and bound to n0's
    GPU 0 once the plugin marks a. No GPU is over-committed at any point."""
    stub, old = world(half("a"), half("b"), handoff=HandoffRule())
    cycle(stub, old)
    assert sorted(stub.asked) == ["a"] and old.queued_behind_plugin()
    stub.answer("a", started=False)

    sched = restarted(stub)
    first = cycle(stub, sched)
    assert not stub.asked  # nothing bound while a awaits Allocate on n0, and b not sent to n1
    b = next(p for p in sched.cache.pods.values() if p.name == "b")
    assert first.reasons[b.uid].reason is Reason.WAITING_FOR_DEVICE_PLUGIN
    assert gpu_used(sched) == [[MILLI_PER_GPU, 0], [0, 0]]  # a's half and b's reserved half, nothing else
    touch(stub, "a", **{GPU_ALLOCATED: '{"gpus": []}'})
    cycle(stub, sched)
    assert sorted(stub.asked) == ["b"] and stub.asked["b"][1].node == "n0"
    assert [g.index for g in stub.asked["b"][1].gpus] == [0]
    stub.answer("b", started=False)
    cycle(stub, sched)
    assert gpu_used(sched) == [[MILLI_PER_GPU, 0], [0, 0]]


def test_a_restart_after_the_mark_binds_the_queued_fraction_in_its_first_cycle() -> None:
    """The plugin's mark for a arrives while no scheduler runs: the new one sees n0 free of pods awaiting
    Allocate and binds b next to a at once (one GPU for both halves)."""
    stub, old = world(half("a"), half("b"), handoff=HandoffRule())
    cycle(stub, old)
    stub.answer("a", started=False)
    touch(stub, "a", **{GPU_ALLOCATED: '{"gpus": []}'})

    sched = restarted(stub)
    cycle(stub, sched)
    assert sorted(stub.asked) == ["b"] and stub.asked["b"][1].node == "n0"
    assert [g.index for g in stub.asked["b"][1].gpus] == [0]
    assert gpu_used(sched) == [[MILLI_PER_GPU, 0], [0, 0]]


def test_a_restart_with_the_first_bind_unanswered_places_each_fraction_once() -> None:
    """The old scheduler dies with a's bind sent but not carried out (the API server never got it) and b
    queued: the new one sees two pending halves and places them as a fresh burst: a bound, b queued
    behind it, then both on one GPU; never two of them awaiting Allocate on a node."""
    stub, old = world(half("a"), half("b"), handoff=HandoffRule())
    cycle(stub, old)
    assert sorted(stub.asked) == ["a"]

    sched = restarted(stub)  # a's bind is lost with the old process
    used = [u for u in drain(stub, sched, ORDERS["all at once"], 0, 2) if u]
    assert used == [MILLI_PER_GPU]
