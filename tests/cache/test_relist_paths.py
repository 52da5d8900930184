"""A relist's fast paths keep the state the slow ones make (issue 32).

A restarted scheduler applies the whole relist in one batch: pods first seen take the mirror's short path
(`ClusterMirror._take_first`), placements read from assignments are written to the arrays in one array
program (`Ledger.hold_many`), pods' resources are read once per distinct declaration (`parse._declared`), the live workload counts pods by size only, and the first session re-owns
every running pod without recounting the inter-pod rules. Each of these must leave exactly the state the
plain path leaves: the same events applied one at a time (every placement held on its own), parsed with
cold memos. The world is mixed: fractions, whole GPUs, a gang, a pod with a sidecar, CPU-only pods, a
pending pod, a node whose GPU memory is still unknown, pods of another scheduler, and broken assignments
(malformed, another node, a GPU no node has, one over-committing its GPU)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from scheduler.api.keys import GPU_ASSIGNMENT, GPU_FRACTION, GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL, POD_GROUP
from scheduler.cache import mirror
from scheduler.cache.cache import Cache
from scheduler.cache.cluster import WatchEvent
from scheduler.cache.ledger import Ledger
from scheduler.model import parse
from scheduler.model.types import Placement
from scheduler.placement.live_workload import WorkloadLearner
from scheduler.state.backend import get_namespace
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import demand_for, size_of
from tests.framework.helpers import A100, cluster, node, pod, podgroup, queue, run

ARRAYS = ("free_milli", "free_mib", "total_mib", "present", "healthy", "free_cpu", "free_mem", "free_pods",
          "free_scalar", "port_use", "valid", "cordoned")  # fmt: skip


def _pod(name: str, queue_name: str, **kw: Any) -> dict[str, Any]:
    obj = pod(name, queue_name, arrival_s=0, duration_s=100_000, **kw)
    obj["metadata"]["namespace"] = "ns"
    return obj


def _world() -> list[WatchEvent]:
    """What a restarted scheduler lists: a world the scheduler itself placed, plus pods it did not."""
    sidecar = _pod("sidecar", "b", gpus=1)
    sidecar["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always",
                                          "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]  # fmt: skip
    objects = [
        node("n1", A100, 4, 32, 256), node("n2", A100, 4, 32, 256), queue("a", None, 4), queue("b", None, 4),
        podgroup("g", "ns", "a", 2),
        *[_pod(f"frac-{i}", "a", annotations={GPU_FRACTION: f"0.{i + 2}"}) for i in range(4)],
        _pod("whole-0", "b", gpus=1), _pod("whole-1", "b", gpus=2), sidecar,
        _pod("g-0", "a", gpus=1, annotations={POD_GROUP: "g"}), _pod("g-1", "a", gpus=1, annotations={POD_GROUP: "g"}),
        _pod("cpu-0", "b", cpu="3"), _pod("too-big", "b", gpus=8),
    ]  # fmt: skip
    sim, sched = cluster(objects)
    run(sim, sched, cycles=3)
    sim.relist()
    events = sim.drain_events()
    running = {ev.obj["metadata"]["name"]: ev.obj for ev in events if ev.kind == "Pod"}
    assert running["g-0"]["spec"].get("nodeName") and running["frac-3"]["spec"].get("nodeName")

    unknown = node("n3", A100, 2, 16, 64)  # no memory label and no product known: MiB still to come
    for label in (GPU_PRODUCT_LABEL, GPU_MEMORY_LABEL):
        unknown["metadata"]["labels"].pop(label)
    extra: list[dict[str, Any]] = [unknown]

    def copy_of(name: str, new: str, assignment: str | None) -> dict[str, Any]:
        obj = copy.deepcopy(running[name])
        obj["metadata"].update(name=new, uid=f"uid-{new}")
        if assignment is None:
            obj["metadata"]["annotations"].pop(GPU_ASSIGNMENT, None)
        else:
            obj["metadata"]["annotations"][GPU_ASSIGNMENT] = assignment
        return obj

    whole = running["whole-0"]["metadata"]["annotations"][GPU_ASSIGNMENT]

    def edited(**fields: Any) -> str:
        raw = json.loads(whole)
        raw.update(fields)
        return json.dumps(raw)

    gpu = json.loads(whole)["gpus"][0]
    on_n3 = copy_of("frac-0", "frac-n3", edited(node="n3", gpus=[{**gpu, "index": 1, "milli": 500}]))
    on_n3["spec"]["nodeName"] = "n3"
    foreign = copy_of("whole-0", "foreign", None)
    foreign["spec"]["schedulerName"] = "default-scheduler"
    foreign_cpu = copy_of("cpu-0", "foreign-cpu", None)
    foreign_cpu["spec"]["schedulerName"] = "default-scheduler"
    foreign_n3 = copy_of("whole-0", "foreign-n3", None)
    foreign_n3["spec"].update(schedulerName="default-scheduler", nodeName="n3")
    extra += [
        on_n3, foreign, foreign_cpu, foreign_n3,
        copy_of("whole-0", "malformed", "{not json"),
        copy_of("whole-0", "other-node", edited(node="elsewhere")),
        copy_of("whole-0", "gpu-70", edited(gpus=[{**gpu, "index": 70}])),
        copy_of("whole-0", "overcommits", whole),
        copy_of("frac-1", "bare-fraction", None),
    ]  # fmt: skip
    for obj in extra:
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
    return events + [WatchEvent(o["kind"], "ADDED", o) for o in extra]


def _cache() -> Cache:
    return Cache.create(get_namespace("numpy"), max_gpus=8, capacity=8)


def _picture(cache: Cache) -> dict[str, Any]:
    state, ledger = cache.state, cache.ledger
    cache.index.jobs()  # the first session: every running job built, pinned and its pods re-owned
    return {
        "arrays": {a: state.host(getattr(state, a)).tolist() for a in ARRAYS},
        "blocked": dict(state.blocked),
        "holdings": [
            {k: (h.kind, h.placement, h.owner) for k, h in table.items()}
            for table in (ledger.pods, ledger.releasing, ledger.reserved)
        ],
        "usage": (cache.index.usage.by_queue(), cache.index.usage.by_queue(nonpreemptible=True)),
        "pods": dict(cache.pods),
        "jobs": {j.key: j for j in cache.index.jobs()},
        "uncharged": sorted(cache.mirror.uncharged),
        "unsized": {k: sorted(v) for k, v in cache.mirror.unsized.items() if v},
        "topology": cache.pod_topology.recorded(),
        "errors": sorted(cache.errors),
    }


def _cold_memos() -> None:
    parse._RESOURCES_MEMO.clear()
    parse._parsed_quantity.cache_clear()
    parse._gpu_request.cache_clear()


def _hold_each(ledger: Ledger, items: Mapping[str, Placement]) -> None:
    for uid, placement in items.items():
        ledger.hold(uid, placement)


def test_a_relist_in_one_batch_leaves_the_state_events_one_at_a_time_leave(monkeypatch: Any) -> None:
    events = _world()
    bulk = _cache()
    bulk.apply(copy.deepcopy(events))
    one_by_one = _cache()
    with monkeypatch.context() as m:
        m.setattr(Ledger, "hold_many", _hold_each)  # each placement written and told on its own
        m.setattr(mirror, "_uid", lambda _obj: None)  # every pod event the full path (`_on_pod`)
        for ev in copy.deepcopy(events):
            _cold_memos()
            one_by_one.apply([ev])
    fast, slow = _picture(bulk), _picture(one_by_one)
    for part in fast:
        assert fast[part] == slow[part], part
    # The world has what it claims: fractions, whole GPUs, a gang, foreign and broken pods.
    assert any("malformed" in e for e in fast["errors"]) and any("elsewhere" in e for e in fast["errors"])
    assert "uid-overcommits" in fast["uncharged"] and "uid-frac-n3" in {
        u for v in fast["unsized"].values() for u in v
    }
    assert (
        "uid-foreign-n3" in fast["holdings"][0]
        and "uid-foreign" in fast["uncharged"]
        and "ns/g" in fast["jobs"]
    )
    assert fast["usage"][0]["a"][0] > 0 and fast["usage"][0]["b"][0] > 0


def test_a_pod_parsed_with_warm_memos_is_the_pod_parsed_cold() -> None:
    objs = [ev.obj for ev in _world() if ev.kind == "Pod"]
    warm = [parse.parse_pod(o) for o in objs]
    for obj, seen in zip(objs, warm, strict=True):
        _cold_memos()
        assert parse.parse_pod(obj) == seen
    for obj in objs:
        assert parse.pod_resources_shared(obj["spec"]) == parse.pod_resources(obj["spec"])


def test_the_live_workload_counts_a_pod_by_its_size_as_its_whole_demand_says() -> None:
    pods = [parse.parse_pod(ev.obj) for ev in _world() if ev.kind == "Pod"]
    for p in pods:
        full, size = demand_for(p), size_of(p)
        fields = ("cpu_milli", "memory_mib", "num_gpus", "gpu_milli", "gpu_mib", "models")
        assert all(getattr(full, f) == getattr(size, f) for f in fields), p.key
    cache = _cache()
    cache.apply(_world())
    learned = WorkloadLearner(min_pods=1).observe({p.uid: p for p in pods}, cache.state)
    assert learned is not None and learned.types


def test_a_relist_of_running_pods_without_gpus_is_written_to_the_arrays_at_once(monkeypatch: Any) -> None:
    """Tessera writes no assignment for a pod that holds no GPU: a relist of many such pods (and of pods
    of other schedulers that ask none) is still one array write, not one a pod (issue 32: 23,000 CPU-only
    pods delayed a failover's first bind by seconds)."""
    cache = _cache()
    cache.apply([WatchEvent("Node", "ADDED", node(f"n{i}", A100, 4, 64, 256)) for i in range(4)])
    pods = []
    for i in range(40):
        obj = _pod(f"cpu-{i}", "b", cpu="1")
        obj["metadata"]["uid"] = f"uid-{i}"
        obj["spec"].update(nodeName=f"n{i % 4}", schedulerName="tessera" if i % 2 else "default-scheduler")
        obj["status"] = {"phase": "Running"}
        pods.append(WatchEvent("Pod", "ADDED", obj))
    writes: list[int] = []
    write_many = ClusterState.write_many

    def counted(state: ClusterState, placements: list[Placement], sign: int = 1) -> None:
        writes.append(len(placements))
        write_many(state, placements, sign)

    monkeypatch.setattr(ClusterState, "write_many", counted)
    cache.apply(pods)
    assert writes == [40]
    assert int(cache.state.host(cache.state.free_cpu)[:4].sum()) == 4 * 64_000 - 40 * 1000


def test_absent_maps_are_one_shared_read_only_map() -> None:
    """A relist of pods without labels, annotations or a node selector makes no map per pod: they share
    one, which refuses writes (a `PodInfo` is never written to); a copy of it is a plain, writable map."""
    a, b = (parse.parse_pod({"metadata": {"name": n}, "spec": {"containers": [{"name": "c"}]}}) for n in "ab")
    assert a.labels is b.labels is a.annotations is a.node_selector == {}
    try:
        a.labels["x"] = "y"
    except TypeError:
        pass
    else:
        raise AssertionError("the shared empty map took a write")
    for copied in (copy.copy(a.labels), copy.deepcopy(a.labels)):
        copied["x"] = "y"
        assert type(copied) is dict and a.labels == {}
