"""The cache accounts every pod holding resources exactly once, whatever order the watches deliver."""

import json

from scheduler.api.keys import GPU_ASSIGNMENT
from scheduler.cache.cache import Cache
from scheduler.cache.cluster import WatchEvent
from scheduler.state.backend import get_namespace
from tests.framework.helpers import A100, node, pod


def bound_pod(name: str, node_name: str, slot: int, milli: int) -> dict:
    p = pod(name, "default", arrival_s=0, duration_s=10, annotations={"gpu-fraction": str(milli / 1000)})
    p["metadata"]["uid"] = f"uid-{name}"
    p["metadata"]["annotations"][GPU_ASSIGNMENT] = json.dumps(
        {
            "node": node_name,
            "gpus": [{"index": slot, "uuid": "", "milli": milli, "memoryMiB": 0}],
            "assumedAt": "2026-01-01T00:00:00Z",
        }
    )
    p["spec"]["nodeName"] = node_name
    p["status"] = {"phase": "Running"}
    return p


def test_pod_seen_before_its_node_is_accounted_when_the_node_arrives():
    cache = Cache.create(get_namespace("numpy"))
    cache.apply([WatchEvent("Pod", "ADDED", bound_pod("early", "n1", 1, 400))])
    assert cache.placements == {}
    cache.apply([WatchEvent("Node", "ADDED", node("n1", A100, 2, 16, 64))])
    assert cache.state.node_gpu_row(0) == [1000, 600]
    assert cache.placements["uid-early"].gpus[0].mib == 16384  # 0.4 of 40960 MiB
    cache.apply([WatchEvent("Node", "MODIFIED", node("n1", A100, 2, 16, 64))])  # no double count
    assert cache.state.node_gpu_row(0) == [1000, 600]


def test_pod_deleted_before_its_node_arrives_is_never_accounted():
    cache = Cache.create(get_namespace("numpy"))
    p = bound_pod("gone", "n1", 0, 500)
    cache.apply([WatchEvent("Pod", "ADDED", p), WatchEvent("Pod", "DELETED", p)])
    cache.apply([WatchEvent("Node", "ADDED", node("n1", A100, 2, 16, 64))])
    assert cache.state.node_gpu_row(0) == [1000, 1000] and cache.placements == {}


def test_invalid_objects_are_reported_and_the_rest_applied():
    cache = Cache.create(get_namespace("numpy"))
    bad_node = node("bad", A100, 2, 16, 64)
    bad_node["metadata"]["labels"]["nvidia.com/gpu.memory"] = "40GB"
    bad_queue = {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "q"},
                 "spec": {"resources": {"gpu": {"quota": 4, "limit": 2}}}}  # fmt: skip
    cache.apply([
        WatchEvent("Node", "ADDED", bad_node),
        WatchEvent("Queue", "ADDED", bad_queue),
        WatchEvent("Node", "ADDED", node("good", A100, 2, 16, 64)),
    ])  # fmt: skip
    assert cache.state.row_of("good") is not None and cache.state.row_of("bad") is None
    assert any("label nvidia.com/gpu.memory='40GB' is not MiB" in e for e in cache.errors)
    assert any("limit 2 is below quota 4" in e for e in cache.errors)


def test_gpus_a_node_gains_later_are_free():
    """The kubelet registers its Node before the device plugin's GPUs are in its capacity."""
    cache = Cache.create(get_namespace("numpy"))
    cache.apply([WatchEvent("Node", "ADDED", node("n1", A100, 0, 16, 64))])
    cache.apply([WatchEvent("Node", "MODIFIED", node("n1", A100, 2, 16, 64))])
    assert cache.state.node_gpu_row(0) == [1000, 1000]
    assert cache.state.allocated_milli() == 0
