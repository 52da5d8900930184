"""Placement kernels: filters, conversions and policies, identical on numpy and array-api-strict."""

import random

import pytest

from scheduler.model.types import NodeInfo, Taint, Toleration
from scheduler.placement import explain_unschedulable, feasible, make_policy, place_one
from scheduler.state import ClusterState, PodDemand
from scheduler.state.backend import get_namespace

BACKENDS = ["numpy", "strict"]


def make_state(backend, nodes):
    s = ClusterState(get_namespace(backend), max_gpus=8, capacity=4)
    for n in nodes:
        s.add_node(n)
    return s


def a100(name, gpus=4, mem=40960, **kw):
    return NodeInfo(
        name=name,
        cpu_milli=32000,
        memory_mib=131072,
        gpu_count=gpus,
        gpu_model="A100",
        gpu_memory_mib=mem,
        **kw,
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_request_converts_with_each_gpus_memory(backend):
    s = make_state(backend, [a100("small", mem=40960), a100("big", mem=81920)])
    d = PodDemand(num_gpus=1, gpu_mib=20480)
    assert s.share_for(0, 0, 0, 20480).milli == 500
    assert s.share_for(1, 0, 0, 20480).milli == 250
    assert s.share_for(0, 0, 250, 0).mib == 10240
    pl = place_one(s, make_policy("binpack"), d)
    assert pl is not None and pl.gpus[0].mib == 20480


@pytest.mark.parametrize("backend", BACKENDS)
def test_filters_cpu_memory_model_selector_taints_health(backend):
    nodes = [
        a100("tainted", taints=(Taint("dedicated", "infer", "NoSchedule"),)),
        a100("labelled", labels={"zone": "a"}),
        NodeInfo("t4", 32000, 131072, 2, "T4", 15360),
        NodeInfo("cpu-only", 64000, 262144),
    ]
    s = make_state(backend, nodes)

    def rows(d):
        mask, _ = feasible(s, d)
        return [s.node_names[i] for i in range(s.num_rows) if bool(mask[i])]

    assert rows(PodDemand(num_gpus=1, gpu_milli=500)) == ["labelled", "t4"]
    assert rows(
        PodDemand(num_gpus=1, gpu_milli=500, tolerations=(Toleration("dedicated", "Equal", "infer"),))
    ) == ["tainted", "labelled", "t4"]
    assert rows(PodDemand(num_gpus=1, gpu_milli=500, models=frozenset({"T4"}))) == ["t4"]
    assert rows(PodDemand(num_gpus=1, gpu_milli=500, selector=("zone=a",))) == ["labelled"]
    assert rows(PodDemand(num_gpus=3, gpu_milli=1000)) == ["labelled"]
    assert rows(PodDemand(cpu_milli=40000)) == ["cpu-only"]
    assert rows(PodDemand(num_gpus=1, gpu_mib=20000)) == ["labelled"]  # does not fit a 15 GiB T4
    for j in range(4):
        s.set_gpu_health(1, j, False)
    assert rows(PodDemand(num_gpus=1, gpu_milli=500)) == ["t4"]
    s.set_gpu_health(1, 2, True)
    s.set_reported_used(1, 2, 30000)  # NVML sees memory used beyond our accounting
    assert rows(PodDemand(num_gpus=1, gpu_milli=500)) == ["t4"]  # needs 20480 MiB, only ~10 GiB really free
    assert rows(PodDemand(num_gpus=1, gpu_milli=200)) == ["labelled", "t4"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_binpack_fills_one_gpu_spread_uses_many(backend):
    for policy, expected in (
        ("binpack", {(0, 0)}),
        ("spread", {(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)}),
    ):
        s = make_state(backend, [a100("a"), a100("b")])
        used = set()
        for _ in range(4):
            pl = place_one(s, make_policy(policy), PodDemand(num_gpus=1, gpu_milli=250))
            assert pl is not None
            s.place(pl)
            used.add((pl.node, pl.gpus[0].slot))
        assert used <= expected and (len(used) == 1 if policy == "binpack" else len(used) == 4)


def test_kernels_identical_on_numpy_and_strict():
    rng = random.Random(3)
    nodes = [a100(f"n{i}", gpus=rng.choice([2, 4, 8]), mem=rng.choice([40960, 81920])) for i in range(12)]
    demands = [
        rng.choice(
            [
                PodDemand(
                    cpu_milli=1000, memory_mib=1024, num_gpus=1, gpu_milli=rng.choice([100, 250, 500, 700])
                ),
                PodDemand(cpu_milli=2000, memory_mib=4096, num_gpus=rng.choice([1, 2, 4]), gpu_milli=1000),
                PodDemand(cpu_milli=1000, num_gpus=1, gpu_mib=rng.choice([8000, 20000])),
                PodDemand(cpu_milli=500, memory_mib=512),
            ]
        )
        for _ in range(80)
    ]
    results = {}
    for backend in BACKENDS:
        for policy in ("binpack", "spread"):
            s = make_state(backend, nodes)
            out = []
            for d in demands:
                pl = place_one(s, make_policy(policy), d)
                out.append(pl)
                if pl is not None:
                    s.place(pl)
            results[(backend, policy)] = (out, s.allocated_milli())
    assert results[("numpy", "binpack")] == results[("strict", "binpack")]
    assert results[("numpy", "spread")] == results[("strict", "spread")]
    assert results[("numpy", "binpack")][0] != results[("numpy", "spread")][0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_explain_counts_each_filter(backend):
    s = make_state(
        backend,
        [a100("a", gpus=2), NodeInfo("t4", 4000, 8192, 2, "T4", 15360), NodeInfo("cpu", 64000, 262144)],
    )
    msg = explain_unschedulable(
        s, PodDemand(cpu_milli=8000, num_gpus=2, gpu_milli=1000, models=frozenset({"A100", "T4"}))
    )
    assert msg.startswith("no node fits 2 whole GPUs (model A100|T4)")
    assert "1 with model not in A100|T4" in msg and "1 short of CPU" in msg
    pl = place_one(s, make_policy("binpack"), PodDemand(num_gpus=1, gpu_milli=1000))
    s.place(pl)
    msg = explain_unschedulable(s, PodDemand(num_gpus=2, gpu_milli=1000, models=frozenset({"A100"})))
    assert "lack 2 free GPUs" in msg


@pytest.mark.parametrize("backend", BACKENDS)
def test_rollback_restores_arrays_exactly(backend):
    s = make_state(backend, [a100("a"), a100("b")])
    before = (s.host(s.free_milli).tolist(), s.host(s.free_cpu).tolist())
    cp = s.checkpoint()
    for d in (
        PodDemand(cpu_milli=100, num_gpus=2, gpu_milli=1000),
        PodDemand(cpu_milli=100, num_gpus=1, gpu_milli=300),
    ):
        s.place(place_one(s, make_policy("binpack"), d))
    assert s.allocated_milli() == 2300
    s.rollback(cp)
    assert (s.host(s.free_milli).tolist(), s.host(s.free_cpu).tolist()) == before


def test_node_removal_recycles_rows_and_growth_keeps_data():
    s = make_state("numpy", [a100(f"n{i}") for i in range(3)])
    s.place(place_one(s, make_policy("binpack"), PodDemand(num_gpus=1, gpu_milli=400)))
    for i in range(3, 40):  # forces several row growths
        s.add_node(a100(f"n{i}"))
    assert s.allocated_milli() == 400 and s.gpu_capacity() == 160
    s.remove_node("n5")
    row = s.add_node(a100("fresh"))
    assert row == 5 and s.gpu_capacity() == 160
    s.add_node(NodeInfo("huge", 64000, 262144, 16, "H100", 81920))  # more GPUs than columns
    assert s.max_gpus == 16 and s.gpu_capacity() == 176 and s.allocated_milli() == 400
