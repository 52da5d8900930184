"""Property: once the cluster can hold every quota, each queue with demand receives at least
min(quota, demand), whoever came first, over random queue trees and workloads."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.framework.helpers import A100, cluster, node, pod, queue
from tests.queues.util import GRACE_S, Recorder, gpus_by_queue


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[dict], dict[str, tuple[float, int, float]]]:
    n_leaves = draw(st.integers(2, 5))
    n_parents = draw(st.integers(0, 2))
    leaves = []
    for i in range(n_leaves):
        quota = draw(st.integers(0, 4))
        limit = draw(st.one_of(st.just(-1), st.integers(quota, quota + 4)))
        demand = draw(st.integers(0, 8))
        leaves.append((f"q{i}", quota, draw(st.integers(1, 3)), limit, demand, draw(st.booleans())))
    parent_of = {
        name: (f"p{draw(st.integers(0, n_parents - 1))}" if n_parents else None) for name, *_ in leaves
    }
    objs: list[dict] = []
    for p in sorted({p for p in parent_of.values() if p}):
        quota = sum(q for name, q, *_ in leaves if parent_of[name] == p)  # children's quotas add up
        objs.append(queue(p, None, quota, weight=draw(st.integers(1, 3)), limit=-1))
    total = sum(q for _, q, *_ in leaves) + draw(st.integers(0, 4))
    objs += [node(f"n{i}", A100, 4, 64, 512) for i in range(max(1, math.ceil(total / 4)))]
    expect = {}
    for name, quota, weight, limit, demand, late in leaves:
        objs.append(queue(name, parent_of[name], quota, weight=weight, limit=limit))
        for k in range(demand):
            cls = draw(st.sampled_from(["train", "train", "build-preemptible", "build"]))
            objs.append(pod(f"{name}-{k}", name, arrival_s=10 if late else 0, duration_s=10_000, gpus=1,
                            cpu="1", memory="1Gi", priority_class=cls))  # fmt: skip
        expect[name] = (min(quota, demand), demand, limit)
    return objs, expect


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_each_queue_gets_min_of_quota_and_demand(case):
    objs, expect = case
    sim, sched = cluster(objs)
    rec = Recorder(sim, sched)
    # Late queues arrive at t=10 and find early ones holding everything they could borrow; what they
    # reclaim is theirs once the victims have terminated.
    rec.run(16 + GRACE_S)
    got = gpus_by_queue(sim)
    for name, (owed, _demand, limit) in expect.items():
        assert got.get(name, 0.0) >= owed, f"{name}: {got.get(name, 0.0)} < {owed}; all: {got}"
        assert limit < 0 or got.get(name, 0.0) <= limit
