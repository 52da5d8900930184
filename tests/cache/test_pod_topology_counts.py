"""Inter-pod counts are exact whenever they are read, however late the holdings behind them are counted:
holdings of pods without anti-affinity are counted when counts are next read (`PodTopology._unrecorded`),
so pods that come, change labels and go between two reads, in batches or one by one, must leave the counts
exactly what the running pods make them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.cache.cache import Cache
from scheduler.cache.cluster import WatchEvent
from scheduler.cache.pod_topology import CountKey, Scope
from scheduler.model.selectors import LabelSelector, Requirement
from scheduler.sim.builtin import node
from scheduler.state.backend import get_namespace
from tests.framework.helpers import A100

NODES = 3
APPS = ("a", "b")
HOST = "kubernetes.io/hostname"


def _running(name: str, row: int, app: str, *, anti: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "tessera",
        "nodeName": f"n{row}",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
    }
    if anti:  # an existing pod's anti-affinity: counted at once, never deferred
        term = {"labelSelector": {"matchLabels": {"app": "b"}}, "topologyKey": HOST}
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": app}},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def _key(app: str) -> CountKey:
    selector = LabelSelector((Requirement("app", "In", (app,)),))
    return CountKey((Scope(frozenset({"default"}), None, selector),))


STEP = st.one_of(
    st.tuples(
        st.just("add"), st.integers(0, 9), st.integers(0, NODES - 1), st.sampled_from(APPS), st.booleans()
    ),
    st.tuples(st.just("relabel"), st.integers(0, 9), st.sampled_from(APPS)),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("finish"), st.integers(0, 9)),
    st.tuples(st.just("read")),
    st.tuples(st.just("flush")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, max_size=40))
def test_counts_read_at_any_time_are_those_of_the_running_pods(steps: list[tuple[Any, ...]]) -> None:
    cache = Cache.create(get_namespace("numpy"), max_gpus=1, capacity=NODES)
    nodes = []
    for i in range(NODES):
        obj = node(f"n{i}", A100, 0, 32, 256)
        obj["metadata"]["labels"][HOST] = f"n{i}"
        nodes.append(obj)
    cache.apply([WatchEvent("Node", "ADDED", n) for n in nodes])
    world: dict[str, dict[str, Any]] = {}  # name -> the pod as last sent, running
    finished: dict[str, dict[str, Any]] = {}
    batch: list[WatchEvent] = []

    def send(ev: WatchEvent) -> None:
        batch.append(ev)

    def flush() -> None:
        cache.apply(batch)
        batch.clear()

    def read() -> None:
        flush()
        topo = cache.pod_topology
        for app in APPS:
            want = [0] * NODES
            for p in world.values():
                if p["metadata"]["labels"]["app"] == app:
                    want[int(p["spec"]["nodeName"][1:])] += 1
            assert [int(x) for x in topo._dense_counted(_key(app))] == want, (app, steps)

    for step in steps:
        op, *args = step
        if op == "add":
            i, row, app, anti = args
            name = f"p{i}"
            if name in world or name in finished:
                continue
            world[name] = _running(name, row, app, anti=anti)
            send(WatchEvent("Pod", "ADDED", world[name]))
        elif op == "relabel":
            i, app = args
            name = f"p{i}"
            if name not in world:
                continue
            old = world[name]
            new = {**old, "metadata": {**old["metadata"], "labels": {"app": app}}}
            world[name] = new
            send(WatchEvent("Pod", "MODIFIED", new))
        elif op == "finish":  # it holds nothing any more, but is still a pod the mirror knows
            name = f"p{args[0]}"
            if name in world:
                done = world.pop(name)
                finished[name] = {**done, "status": {"phase": "Succeeded"}}
                send(WatchEvent("Pod", "MODIFIED", finished[name]))
        elif op == "delete":
            name = f"p{args[0]}"
            if name in world:
                send(WatchEvent("Pod", "DELETED", world.pop(name)))
        elif op == "flush":
            flush()
        else:
            read()
    read()
    assert not cache.errors
