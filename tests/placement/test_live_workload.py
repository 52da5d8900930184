"""The live scheduler's typical workload: learned from the pods it knows, trusted only with evidence;
until then the fragment-driven policies place exactly as `binpack` does."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.api.gpu_request import GPURequest
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.types import GPUShare, NodeInfo, Placement, PodInfo
from scheduler.placement import live_workload
from scheduler.placement.live_workload import WorkloadLearner
from scheduler.placement.placer import place_one
from scheduler.placement.registry import make_policy
from scheduler.placement.workload import TaskType, TypicalWorkload
from scheduler.sim.builtin import builtin_manifests
from scheduler.sim.cluster import SimCluster
from scheduler.state.backend import namespace
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

FRAGMENT_POLICIES = ["fgd", "fragfit", "wastefit"]


def _state(max_gpus: int = 8) -> ClusterState:
    """Two 8 x H100 nodes and two 4 x L4 nodes (a smaller GPU count than the arrays' width)."""
    state = ClusterState(namespace("numpy"), max_gpus=max_gpus, capacity=8)
    for i in range(2):
        state.add_node(NodeInfo(f"h100-{i}", 96_000, 1_048_576, 8, "NVIDIA-H100-80GB-HBM3", 81_559))
    for i in range(2):
        state.add_node(NodeInfo(f"l4-{i}", 48_000, 393_216, 4, "NVIDIA-L4", 23_034))
    return state


def _pod(uid: str, request: GPURequest, cpu: int = 4000, models: frozenset[str] | None = None) -> PodInfo:
    return PodInfo(uid, "ns", uid, "q", 0, True, request, cpu_milli=cpu, memory_mib=16_384, gpu_models=models)


def _fraction(milli: int) -> GPURequest:
    return GPURequest(kind="fraction", num_devices=1, milli=milli)


def _whole(n: int) -> GPURequest:
    return GPURequest(kind="whole", num_devices=n, milli=1000)


# ----------------------------------------------------------------------------------- the policies


@pytest.mark.parametrize("name", FRAGMENT_POLICIES)
def test_without_a_workload_a_fragment_policy_places_exactly_as_binpack(name: str) -> None:
    """Fragmentation measured against a guess is worse than none: an untrained policy is binpack, node and
    GPU, decision by decision."""
    rng = random.Random(5)
    runs = []
    for policy in (make_policy(name), make_policy("binpack")):
        state = _state()
        out = []
        for _ in range(60):
            d = rng.choice(
                [
                    PodDemand(cpu_milli=4000, num_gpus=1, gpu_milli=rng.choice([250, 500, 750])),
                    PodDemand(cpu_milli=8000, num_gpus=rng.choice([1, 2]), gpu_milli=1000),
                    PodDemand(cpu_milli=2000, num_gpus=1, gpu_mib=rng.choice([6000, 16000])),
                    PodDemand(cpu_milli=8000),
                ]
            )
            p = place_one(state, policy, d)
            out.append(None if p is None else (p.node, tuple(g.slot for g in p.gpus)))
            if p is not None:
                state.place(p)
                state.commit()
        runs.append(out)
        rng = random.Random(5)
    assert runs[0] == runs[1]
    assert sum(x is not None for x in runs[0]) > 20


@pytest.mark.parametrize("name", FRAGMENT_POLICIES)
def test_a_share_asked_by_memory_is_placed_on_a_node_with_fewer_gpus_than_the_widest(name: str) -> None:
    """Regression: the arrays are 8 GPUs wide and an L4 node has 4; the absent slots have no memory, and
    the milli a memory share takes there used to come out as 10^7, so every node scored -inf and the
    notebooks of the demo were placed only by consolidation, moving pods out of their way."""
    state = _state()
    policy = make_policy(name)
    policy.set_typical_workload(
        TypicalWorkload((TaskType(4000, 500, 1), TaskType(8000, 1000, 1)), (0.5, 0.5))
    )
    l4 = frozenset({"NVIDIA-L4"})
    p = place_one(state, policy, PodDemand(cpu_milli=2000, num_gpus=1, gpu_mib=10_000, models=l4))
    assert p is not None
    assert state.node_names[p.node].startswith("l4-")
    assert [g.milli for g in p.gpus] == [435]  # ceil(10000 x 1000 / 23034)


# ------------------------------------------------------------------------------------ the learner


def test_no_workload_until_enough_distinct_pods_then_one_from_each_pod_once() -> None:
    state = _state()
    learner = WorkloadLearner(coverage=1.0, min_pods=8)
    pods = {f"f{i}": _pod(f"f{i}", _fraction(500)) for i in range(5)}
    for _ in range(10):  # the same pods, cycle after cycle: still 5 pods of evidence
        assert learner.observe(pods, state) is None
    assert learner.seen == 5
    pods |= {f"w{i}": _pod(f"w{i}", _whole(2), cpu=16_000) for i in range(3)}
    wl = learner.observe(pods, state)
    assert wl is not None
    assert dict(zip(wl.types, wl.popularity, strict=True)) == {
        TaskType(4000, 500, 1): 5 / 8,
        TaskType(16_000, 1000, 2): 3 / 8,
    }
    assert wl.memory_per_gpu == pytest.approx(16_384 * 8 / (5 * 0.5 + 3 * 2))


def test_a_pod_that_stays_pending_counts_once() -> None:
    """The demo's `wants-a100` asks every cycle for 40 minutes: counted per ask, it was half the workload."""
    state = _state()
    learner = WorkloadLearner(coverage=1.0, min_pods=4)
    a100 = frozenset({"NVIDIA-A100-SXM4-80GB"})
    pods = {"stuck": _pod("stuck", _whole(1), models=a100)}
    for i in range(4):
        pods[f"f{i}"] = _pod(f"f{i}", _fraction(250))
        learner.observe(pods, state)
    for _ in range(100):
        learner.observe(pods, state)
    learner.min_pods = 0
    learner._learned_at = 0  # ask for the workload as it stands
    wl = learner.observe(pods, state)
    assert wl is not None
    assert dict(zip(wl.types, wl.popularity, strict=True))[TaskType(4000, 1000, 1, tuple(a100))] == 1 / 5


def test_relearned_on_a_doubling_schedule_then_every_relearn_every_pods() -> None:
    state = _state()
    learner = WorkloadLearner(min_pods=4, relearn_every=16)
    pods: dict[str, PodInfo] = {}
    learned_at = []
    for i in range(80):
        pods[f"p{i:03d}"] = _pod(f"p{i:03d}", _fraction(250 * (1 + i % 3)))
        if learner.observe(pods, state) is not None:
            learned_at.append(learner.seen)
    assert learned_at == [4, 8, 16, 32, 48, 64, 80]


def test_memory_shares_count_as_the_milli_they_take_on_the_gpus_they_may_use() -> None:
    state = _state()
    learner = WorkloadLearner(coverage=1.0, min_pods=3)
    l4 = frozenset({"NVIDIA-L4"})
    mem = GPURequest(kind="memory", num_devices=1, memory_mib=10_000)
    pods = {
        "on-l4": _pod("on-l4", mem, cpu=2000, models=l4),
        "anywhere": _pod("anywhere", mem, cpu=2000),  # the median GPU: 16 H100s against 8 L4s
        "on-a100": _pod("on-a100", mem, cpu=2000, models=frozenset({"NVIDIA-A100-SXM4-80GB"})),  # none here
        "cpu": _pod("cpu", GPURequest()),
    }
    wl = learner.observe(pods, state)
    assert wl is not None and learner.seen == 3
    assert set(wl.types) == {
        TaskType(2000, 435, 1, ("NVIDIA-L4",)),  # ceil(10000 x 1000 / 23034)
        TaskType(2000, 123, 1),  # ceil(10000 x 1000 / 81559)
        TaskType(4000, 0, 0),
    }


def test_the_window_keeps_the_most_recent_pods_and_gone_pods_are_forgotten() -> None:
    state = _state()
    learner = WorkloadLearner(coverage=1.0, min_pods=1, window=10, relearn_every=1)
    pods = {f"a{i}": _pod(f"a{i}", _fraction(250)) for i in range(10)}
    learner.observe(pods, state)
    pods = {f"b{i}": _pod(f"b{i}", _whole(1)) for i in range(10)}  # the first ten are gone
    wl = learner.observe(pods, state)
    assert wl is not None and wl.types == (TaskType(4000, 1000, 1),)
    assert learner._known == set(pods)
    invalid = replace(_pod("bad", _fraction(500)), error="gpu-fraction must be in (0, 1]")
    learner.observe(pods | {"bad": invalid}, state)
    assert learner.seen == 20


def test_a_burst_larger_than_the_window_learns_what_the_pods_one_by_one_teach(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restarted scheduler counts every running pod at once: only the last `window` counted ones are
    sized (the rest would have left the window), and the outcome is that of counting them one by one."""
    state = _state()
    rng = random.Random(3)
    kinds = [_fraction(250), _fraction(500), _whole(1), _whole(2), GPURequest(),
             GPURequest(kind="memory", num_devices=1, memory_mib=10_000)]  # fmt: skip
    pods: dict[str, PodInfo] = {}
    for i in range(300):
        p = _pod(f"p{i:03d}", rng.choice(kinds), cpu=rng.choice([1000, 4000]))
        if i % 17 == 0:
            p = replace(p, error="invalid")
        elif i % 19 == 0:
            p = replace(p, ours=False)
        elif i % 23 == 0:  # a size in MiB with no GPU it may use here: no evidence
            p = replace(p, request=kinds[-1], gpu_models=frozenset({"NVIDIA-A100-SXM4-80GB"}))
        pods[p.uid] = p
    one_by_one = WorkloadLearner(coverage=1.0, min_pods=1, window=50, relearn_every=10**6)
    one_by_one.observe({"old": _pod("old", _whole(8))}, state)  # what the window held before the burst
    seen: dict[str, PodInfo] = {}
    for uid in sorted(pods):
        seen[uid] = pods[uid]
        one_by_one.observe(seen, state)
    burst = WorkloadLearner(coverage=1.0, min_pods=1, window=50, relearn_every=10**6)
    burst.observe({"old": _pod("old", _whole(8))}, state)
    sized: list[PodInfo] = []
    real_size_of = live_workload.size_of
    monkeypatch.setattr(live_workload, "size_of", lambda pod: sized.append(pod) or real_size_of(pod))
    burst.observe(pods, state)
    assert len(sized) == 50
    assert burst.seen == one_by_one.seen and burst._counts == one_by_one._counts
    assert list(burst._recent) == list(one_by_one._recent)
    assert burst._memory == pytest.approx(one_by_one._memory) and burst._gpus == pytest.approx(
        one_by_one._gpus
    )


# --------------------------------------------------------------------------------- the scheduler


def test_the_scheduler_hands_its_policy_the_workload_of_its_pods() -> None:
    """On the built-in demo, `wastefit` places as binpack until it has seen 64 pods, then scores against
    what they ask: the notebooks as L4 memory shares, the pod no node can host once."""
    sim = SimCluster.from_manifests(builtin_manifests(7))
    sched = Scheduler(sim, SchedulerConfig(policy="wastefit", expected_nodes=56))
    assert sched.learner is not None
    t = 0.0
    while t < 2400:
        sim.advance(t)
        sched.run_cycle()
        if sched.learner.seen >= 64:
            break
        assert not sched.policy.trained  # type: ignore[attr-defined]
        t += 15.0
    sim.advance(t + 15.0)
    sched.run_cycle()
    wl = sched.policy.workload  # type: ignore[attr-defined]
    assert sched.policy.trained and wl is not None  # type: ignore[attr-defined]
    by_type = dict(zip(wl.types, wl.popularity, strict=True))
    assert all(share < 0.4 for share in by_type.values())
    assert any(t.models == ("NVIDIA-L4",) and 0 < t.gpu_milli < 1000 for t in by_type)


def test_a_fixed_workload_is_kept() -> None:
    sim = SimCluster.from_manifests(builtin_manifests(7))
    sched = Scheduler(sim, SchedulerConfig(policy="fgd", expected_nodes=56))
    given = TypicalWorkload((TaskType(4000, 500, 1),), (1.0,))
    sched.fix_workload(given)
    assert sched.learner is None
    for t in (0.0, 600.0, 1200.0):
        sim.advance(t)
        sched.run_cycle()
    assert sched.policy.workload is given  # type: ignore[attr-defined]


def test_memory_share_rows_keep_their_gpu_choice_with_a_used_gpu() -> None:
    """A memory share goes into the gap no typical pod fits (400 milli left, typical pods take 435), not
    onto a whole GPU."""
    state = _state()
    row = state.node_index["l4-0"]
    state.place(Placement(row, (GPUShare(0, 600, 0),), 0, 0))
    state.commit()
    policy = make_policy("wastefit")
    policy.set_typical_workload(TypicalWorkload((TaskType(2000, 435, 1, ("NVIDIA-L4",)),), (1.0,)))
    l4 = frozenset({"NVIDIA-L4"})
    p = place_one(state, policy, PodDemand(cpu_milli=2000, num_gpus=1, gpu_mib=6000, models=l4))
    assert p is not None and p.node == row and [g.slot for g in p.gpus] == [0]
