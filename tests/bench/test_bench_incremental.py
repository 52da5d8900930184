"""The speed-ups must not change a decision: incremental placer vs place_one, bulk vs one-by-one state
updates, jobs kept across cycles vs rebuilt, the bind-echo shortcut vs a full parse."""

import json
import random

import pytest

from scheduler.bench.cluster import BenchCluster
from scheduler.bench.workload import make_nodes, make_pods
from scheduler.cache.cache import Cache
from scheduler.cache.cluster import WatchEvent
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.jobs import build_jobs, job_facts
from scheduler.model.types import GPUShare, NodeInfo, Placement, Taint, Toleration
from scheduler.placement import Capabilities, make_policy, place_one
from scheduler.placement.base_policy import BasePolicy
from scheduler.placement.incremental import IncrementalPlacer
from scheduler.state import ClusterState, PodDemand
from scheduler.state.backend import get_namespace
from scheduler.state.cluster_state import OvercommitError


def nodes(rng, n):
    out = []
    for i in range(n):
        gpus = rng.choice([2, 4, 8])
        taints = (Taint("dedicated", "infer"),) if i % 7 == 3 else ()
        out.append(NodeInfo(f"n{i}", 32000, 131072, gpus, rng.choice(["A100", "T4"]), rng.choice([16384, 40960]),
                            labels={"zone": "a" if i % 2 else "b"}, taints=taints))  # fmt: skip
    return out


def demands(rng):
    return [
        PodDemand(cpu_milli=1000, memory_mib=1024, num_gpus=1, gpu_milli=rng.choice([100, 250, 500, 810])),
        PodDemand(cpu_milli=2000, memory_mib=4096, num_gpus=rng.choice([1, 2, 4]), gpu_milli=1000),
        PodDemand(cpu_milli=1000, num_gpus=1, gpu_mib=rng.choice([8000, 20000])),
        PodDemand(cpu_milli=4000, memory_mib=512),
        PodDemand(num_gpus=1, gpu_milli=300, models=frozenset({"T4"}), selector=("zone=a",)),
        PodDemand(num_gpus=1, gpu_milli=500, tolerations=(Toleration("dedicated", "Exists"),)),
    ]


@pytest.mark.parametrize("backend", ["numpy", "strict"])
@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_incremental_placer_decides_as_place_one(backend, policy):
    rng = random.Random(11)
    xp = get_namespace(backend)
    ref, inc = ClusterState(xp, max_gpus=8, capacity=4), ClusterState(xp, max_gpus=8, capacity=4)
    for n in nodes(rng, 9):
        ref.add_node(n)
        inc.add_node(n)
    pol = make_policy(policy)
    placer = IncrementalPlacer(inc, pol)
    for step in range(160):
        d = rng.choice(demands(rng))
        want, got = place_one(ref, pol, d), placer.place(d)
        assert want == got, (step, d)
        if want is not None:
            ref.place(want)
            inc.place(got)
        if step % 23 == 5:  # a gang rolled back, a node changed, a node added (rows grow): all seen
            cp_r, cp_i = ref.checkpoint(), inc.checkpoint()
            ref.rollback(max(0, cp_r - 3))
            inc.rollback(max(0, cp_i - 3))
        if step % 31 == 7:
            extra = NodeInfo(f"x{step}", 16000, 65536, 4, "A100", 40960)
            ref.add_node(extra)
            inc.add_node(extra)
        if step % 37 == 11:
            ref.set_gpu_health(0, 0, False)
            inc.set_gpu_health(0, 0, False)


@pytest.mark.parametrize("backend", ["numpy", "strict"])
@pytest.mark.parametrize("top_k", [3, 64])
def test_batched_decisions_with_exclusions_decide_as_place_one(backend, top_k, monkeypatch):
    """Many rows and a short `top` (it runs out, is made again, loses and regains rows), nodes excluded for
    a while (a bind lock), releases (rollbacks): every decision is place_one's."""
    monkeypatch.setattr("scheduler.placement.incremental.TOP_K", top_k)
    rng = random.Random(5)
    xp = get_namespace(backend)
    ref, inc = ClusterState(xp, max_gpus=8, capacity=8), ClusterState(xp, max_gpus=8, capacity=8)
    for n in nodes(rng, 40):
        ref.add_node(n)
        inc.add_node(n)
    placer = IncrementalPlacer(inc, make_policy("binpack"))
    exclude = None
    for step in range(300):
        d = rng.choice(demands(rng))
        if step % 17 == 0:
            excluded = rng.sample(range(inc.capacity), 6)
            exclude = xp.asarray([r in excluded for r in range(inc.capacity)], dtype=xp.bool)
        elif step % 17 == 9:
            exclude = None
        want, got = (
            place_one(ref, make_policy("binpack"), d, exclude=exclude),
            placer.place(d, exclude=exclude),
        )
        assert want == got, (step, d)
        if want is not None:
            ref.place(want)
            inc.place(got)
        if step % 29 == 13:
            cp_r, cp_i = ref.checkpoint(), inc.checkpoint()
            ref.rollback(max(0, cp_r - 4))
            inc.rollback(max(0, cp_i - 4))


def test_apply_many_matches_one_by_one_and_refuses_whole():
    xp = get_namespace("numpy")
    one, bulk = ClusterState(xp, max_gpus=4, capacity=8), ClusterState(xp, max_gpus=4, capacity=8)
    for i in range(6):
        n = NodeInfo(f"n{i}", 32000, 65536, 4, "A", 40960)
        one.add_node(n)
        bulk.add_node(n)
    rng = random.Random(2)
    pls = [Placement(rng.randrange(6), (GPUShare(rng.randrange(4), 40, 80),), 100, 100) for _ in range(60)]
    for p in pls:
        one.place(p)
    bulk.apply_many(pls)
    for name in ("free_milli", "free_mib", "free_cpu", "free_mem"):
        assert bulk.host(getattr(bulk, name)).tolist() == one.host(getattr(one, name)).tolist()
    before = bulk.host(bulk.free_milli).tolist()
    with pytest.raises(OvercommitError):
        bulk.apply_many(
            [Placement(0, (GPUShare(1, 10, 10),), 0, 0), Placement(1, (GPUShare(0, 1000, 1),), 0, 0)]
        )
    assert bulk.host(bulk.free_milli).tolist() == before
    bulk.rollback(0)
    assert bulk.allocated_milli() == 0


def test_cache_jobs_equal_build_jobs_and_bind_echo_is_applied():
    rng = random.Random(4)
    cluster = BenchCluster()
    for n in make_nodes(6, 8):
        cluster.create("Node", n)
    sched = Scheduler(cluster, SchedulerConfig(backend="numpy", max_gpus_per_node=8, expected_nodes=6))
    batch = make_pods("p", 50, gang_fraction=0.3, rng=rng)
    for g in batch.podgroups:
        cluster.create("PodGroup", g)
    for i, p in enumerate(batch.pods):
        cluster.create("Pod", p)
        if i % 10 == 9:
            sched.run_cycle()
            cluster.delete_pod(f"bench/{batch.pods[i - 5]['metadata']['name']}")
    sched.run_cycle()
    sched.run_cycle()
    cache = sched.cache

    def shape(jobs):
        facts = [job_facts(j, cache.ledger) for j in jobs]
        return sorted((f.job.key, f.job.queue, f.job.min_member, sorted(p.uid for p in f.pending),
                       sorted(p.uid for p in f.running)) for f in facts)  # fmt: skip

    assert shape(cache.index.jobs()) == shape(build_jobs(cache.pods.values(), cache.podgroups))
    running = [p for p in cache.pods.values() if p.holds_resources]
    assert running and all(p.phase.value == "Running" for p in running)  # echoes of our binds
    assert all(p.annotations.get("tessera.dev/gpu-assignment") for p in running)
    used = {q: u for q, u in cache.index.usage.by_queue().items()}
    total = sum(sum(g.milli for g in cache.placements[p.uid].gpus) for p in running)
    assert used["default"][0] == total and not cache.errors


def test_cache_relist_in_bulk_and_errors_per_pod():
    xp = get_namespace("numpy")
    cache = Cache.create(xp, max_gpus=2, capacity=2)
    cache.apply([WatchEvent("Node", "ADDED", n) for n in make_nodes(2, 2)])
    pods = []
    for i in range(5):  # five whole GPUs on four: the last one cannot be accounted
        p = make_pods(f"r{i}", 1, gang_fraction=0.0, rng=random.Random(0)).pods[0]
        p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
        p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "1Gi"}
        p["metadata"]["annotations"].pop("gpu-fraction", None)
        node = f"node-{i % 2:05d}"
        gpus = [{"index": (i // 2) % 2, "milli": 1000}]
        p["metadata"]["annotations"]["tessera.dev/gpu-assignment"] = json.dumps({"node": node, "gpus": gpus})
        p["spec"]["nodeName"], p["status"] = node, {"phase": "Running"}
        pods.append(WatchEvent("Pod", "ADDED", p))
    cache.apply(pods)
    assert len(cache.placements) == 4 and len(cache.errors) == 1 and cache.state.allocated_milli() == 4000


class GlobalScore(BasePolicy):
    """Not row-local: a node's score depends on every other node (distance to the mean of all nodes)."""

    name = "global-test"

    def score_nodes(self, state, d, feasible, fit):
        xp = state.xp
        free = xp.astype(xp.sum(xp.astype(state.free_milli, xp.int64), axis=1), xp.float64)
        live = xp.astype(state.valid, xp.float64)
        return -xp.abs(free - xp.sum(free * live) / xp.sum(live))


class RowLocalLie(GlobalScore):
    """Declares row_local although it is not: the placer trusts the declaration (and keeps stale scores),
    which is what makes the capability worth declaring only when true."""

    name = "lie-test"
    capabilities = Capabilities(row_local=True)


def test_placer_asks_non_row_local_policies_every_time():
    xp = get_namespace("numpy")
    rng = random.Random(5)
    ref, inc = ClusterState(xp, max_gpus=8, capacity=4), ClusterState(xp, max_gpus=8, capacity=4)
    for n in nodes(rng, 7):
        ref.add_node(n)
        inc.add_node(n)
    pol = GlobalScore()
    placer = IncrementalPlacer(inc, pol)
    for _ in range(60):
        d = PodDemand(cpu_milli=500, num_gpus=1, gpu_milli=rng.choice([100, 300, 1000]))
        want, got = place_one(ref, pol, d), placer.place(d)
        assert want == got
        if want is not None:
            ref.place(want)
            inc.place(got)


def test_placer_caches_only_what_the_policy_declares_row_local():
    xp = get_namespace("numpy")
    s = ClusterState(xp, max_gpus=2, capacity=16)
    for i, cpu in enumerate((1000, 5000, 3000)):
        s.add_node(NodeInfo(f"n{i}", cpu, 8192, 2, "A", 16384))
    s.place(Placement(1, (GPUShare(0, 1000, 100),), 0, 0))
    s.place(Placement(2, (GPUShare(0, 500, 100),), 0, 0))  # free milli 2000, 1000, 1500: mean 1500
    d = PodDemand(num_gpus=1, gpu_milli=100)
    honest, lie = IncrementalPlacer(s, GlobalScore()), IncrementalPlacer(s, RowLocalLie())
    assert honest.place(d).node == lie.place(d).node == place_one(s, GlobalScore(), d).node == 2
    s.place(Placement(2, (GPUShare(1, 900, 100),), 0, 0))  # row 2 at 600: the mean moves to 1200
    assert honest.place(d).node == place_one(s, GlobalScore(), d).node == 1
    assert lie.place(d).node == 2  # only row 2 was re-scored (alone): rows 0 and 1 kept stale scores


def test_state_reports_changed_rows_from_versions():
    xp = get_namespace("numpy")
    s = ClusterState(xp, max_gpus=2, capacity=4)
    for i in range(4):
        s.add_node(NodeInfo(f"n{i}", 1000, 1024, 2, "A", 16384))
    v = s.version
    s.place(Placement(3, (GPUShare(0, 100, 10),), 0, 0))
    s.place(Placement(1, (GPUShare(0, 100, 10),), 0, 0))
    s.place(Placement(3, (GPUShare(1, 100, 10),), 0, 0))
    changed = s.changed_rows(v)
    assert changed == [1, 3] == [int(r) for r in xp.nonzero(s.row_version > v)[0]]
    assert s.changed_rows(s.version) == [] and s.changed_rows(-1) is None


def test_job_usage_counts_a_pod_whose_node_arrives_later_once_before_and_after():
    """It runs before its node is known (no place held for it: `unheld`), and is held there once it is."""
    xp = get_namespace("numpy")
    cache = Cache.create(xp, max_gpus=8, capacity=2)
    p = make_pods("late", 1, gang_fraction=0.0, rng=random.Random(0)).pods[0]
    p["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "2", "memory": "1Gi"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    p["metadata"]["annotations"] = {}
    p["spec"]["nodeName"], p["status"] = "node-00000", {"phase": "Running"}
    cache.apply([WatchEvent("Pod", "ADDED", p)])
    cache.index.jobs()
    assert cache.index.usage.by_queue() == {"default": (2000, 2000, 1024)} and not cache.placements
    cache.apply([WatchEvent("Node", "ADDED", n) for n in make_nodes(1, 8)])
    cache.index.jobs()
    assert cache.index.usage.by_queue() == {"default": (2000, 2000, 1024)} and len(cache.placements) == 1
