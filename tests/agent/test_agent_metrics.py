from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from node_agent.agent import Agent
from node_agent.metrics import DEVICE_LABELS

from .conftest import NODE, Scene

DCGM = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
]


def scrape(agent: Agent) -> dict[str, list[Sample]]:
    text = generate_latest(agent.metrics.registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_dcgm_names_and_labels(scene: Scene) -> None:
    solo = scene.add_pod("solo", [(0, 500, 0)])
    a = scene.add_pod("a", [(1, 300, 0)])
    b = scene.add_pod("b", [(1, 300, 0)], namespace="team-b")
    scene.run_process(solo, 0, 10, 2048)
    scene.run_process(a, 1, 11, 1024)
    scene.run_process(b, 1, 12, 4096)
    scene.nvml.set_utilization(0, 55)
    scene.nvml.set_power(0, 250.5)
    agent = scene.agent()
    agent.tick()
    families = scrape(agent)
    uuids = [d.uuid for d in scene.nvml.devices()]
    for name in DCGM:
        samples = families[name]
        assert len(samples) == 2, name
        for s in samples:
            assert sorted(s.labels) == sorted(DEVICE_LABELS)
            assert s.labels["Hostname"] == NODE and s.labels["modelName"] == "NVIDIA A100-40GB"
    by_gpu = {s.labels["gpu"]: s for s in families["DCGM_FI_DEV_FB_USED"]}
    assert by_gpu["0"].value == 2048 and by_gpu["0"].labels["UUID"] == uuids[0]
    # One pod on GPU 0: dcgm-exporter-style pod labels; two pods on GPU 1: empty (per-pod series carry them).
    assert (by_gpu["0"].labels["pod"], by_gpu["0"].labels["namespace"], by_gpu["0"].labels["container"]) == (
        "solo",
        "team-a",
        "main",
    )
    assert by_gpu["1"].labels["pod"] == ""
    assert {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_GPU_UTIL"]}["0"] == 55
    assert {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_POWER_USAGE"]}["0"] == 250.5
    assert {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_FB_FREE"]}["1"] == 40960 - 5120

    used = {
        (s.labels["pod"], s.labels["gpu"]): s.value for s in families["tessera_pod_gpu_memory_used_bytes"]
    }
    assert used == {("solo", "0"): 2048 * 2**20, ("a", "1"): 1024 * 2**20, ("b", "1"): 4096 * 2**20}
    limit = {
        (s.labels["pod"], s.labels["namespace"]): s.value
        for s in families["tessera_pod_gpu_memory_limit_bytes"]
    }
    assert limit[("b", "team-b")] == 12288 * 2**20
    allocated = {s.labels["gpu"]: s.value for s in families["tessera_gpu_allocated_milli"]}
    assert allocated == {"0": 500, "1": 600}


def test_series_follow_pods_and_health(scene: Scene) -> None:
    pod = scene.add_pod("p", [(0, 500, 0)])
    scene.run_process(pod, 0, 10, 2048)
    agent = scene.agent()
    agent.tick()
    scene.nvml.remove_process(10)
    scene.nvml.inject_xid(1, 48)
    agent.tick()
    families = scrape(agent)
    assert families["tessera_pod_gpu_memory_used_bytes"] == []
    assert {s.labels["gpu"]: s.value for s in families["tessera_gpu_healthy"]} == {"0": 1.0, "1": 0.0}
    assert {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_XID_ERRORS"]}["1"] == 48
    events = {
        (s.labels["gpu"], s.labels["kind"]): s.value
        for s in families["tessera_gpu_events"]
        if s.name.endswith("_total")
    }
    assert events == {("1", "xid"): 1.0}
