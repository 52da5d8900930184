"""`tessera-agent bench`: the agent's own cost at a given rate, on fake GPUs.

It runs the real loop (NVML facade, /proc cgroup reads, pod mapping, report, change detection and
publishing into an in-process store, watchdog, metrics rendering as a scrape would) and measures the
process's CPU time and peak RSS with getrusage. The Kubernetes client is imported, as in production.
"""

from __future__ import annotations

import json
import random
import resource
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from node_agent.agent import Agent
from node_agent.cgroup import CgroupResolver
from node_agent.enforcer import Watchdog
from node_agent.events import LogEvents
from node_agent.metrics import AgentMetrics
from node_agent.nvml.fake import FakeNVML
from node_agent.pods import PodInfo, StaticPods
from node_agent.publisher import ReportPublisher
from scheduler.api import AssignedGPU, GPUAssignment

NODE = "bench-node"


@dataclass(frozen=True)
class BenchResult:
    gpus: int
    processes: int
    seconds: float
    interval_s: float
    rounds: int
    publishes: int
    cpu_percent_of_one_core: float
    peak_rss_mib: float
    mean_round_ms: float
    max_round_ms: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


class _MemoryStore:
    """Stands in for CustomObjectsApi so the publish path runs without an API server."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        if name not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        return self.objects[name]

    def create_cluster_custom_object(
        self, group: str, version: str, plural: str, body: dict[str, Any]
    ) -> Any:
        body["metadata"]["resourceVersion"] = "1"
        self.objects[body["metadata"]["name"]] = body
        return body

    def replace_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, body: dict[str, Any]
    ) -> Any:
        body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        self.objects[name] = body
        return body


def _setup(proc_root: Path, nvml: FakeNVML, procs_per_gpu: int) -> StaticPods:
    pods: list[PodInfo] = []
    pid = 10_000
    for device in nvml.devices():
        milli = 1000 // max(1, procs_per_gpu)
        for k in range(procs_per_gpu):
            pid += 1
            uid = f"{device.index:08x}-0000-4000-8000-{k:012x}"
            cid = f"{pid:064x}"
            (proc_root / str(pid)).mkdir()
            (proc_root / str(pid) / "cgroup").write_text(
                "0::/kubepods.slice/kubepods-burstable.slice/"
                f"kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n"
            )
            assignment = GPUAssignment(
                node=NODE, gpus=[AssignedGPU(index=device.index, uuid=device.uuid, milli=milli)]
            )
            pods.append(
                PodInfo(
                    uid=uid,
                    name=f"job-{device.index}-{k}",
                    namespace="bench",
                    node=NODE,
                    containers={cid: "main"},
                    assignment=assignment,
                )
            )
            nvml.add_process(device.index, pid, device.memory_total_mib * milli // 1000 // 2)
    return StaticPods(pods)


def run_bench(spec: str, *, seconds: float, interval: float, procs_per_gpu: int) -> BenchResult:
    import kubernetes.client  # noqa: F401  (loaded by the production agent; its memory counts)

    nvml = FakeNVML(spec, seed=NODE)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as tmp:
        pods = _setup(Path(tmp), nvml, procs_per_gpu)
        metrics = AgentMetrics(NODE)
        publisher = ReportPublisher(_MemoryStore(), heartbeat_s=60.0)
        agent = Agent(
            NODE,
            nvml,
            pods=pods,
            resolver=CgroupResolver(tmp),
            metrics=metrics,
            watchdog=Watchdog("report", events=LogEvents()),
            publisher=publisher,
        )
        round_ms: list[float] = []
        stop = threading.Event()
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        wall0 = time.monotonic()
        while time.monotonic() - wall0 < seconds:
            began = time.monotonic()
            for device in nvml.devices():  # figures that move, as on a busy node
                nvml.set_utilization(device.index, rng.uniform(0, 100))
                nvml.set_temperature(device.index, rng.uniform(40, 80))
            agent.tick()
            generate_latest(metrics.registry)
            round_ms.append((time.monotonic() - began) * 1000)
            stop.wait(max(0.0, interval - (time.monotonic() - began)))
        wall = time.monotonic() - wall0
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    return BenchResult(
        gpus=len(nvml.devices()),
        processes=len(nvml.devices()) * procs_per_gpu,
        seconds=round(wall, 2),
        interval_s=interval,
        rounds=len(round_ms),
        publishes=publisher.writes,
        cpu_percent_of_one_core=round(100.0 * cpu / wall, 3),
        peak_rss_mib=round(usage1.ru_maxrss / 1024.0, 1),  # ru_maxrss is in KiB on Linux
        mean_round_ms=round(sum(round_ms) / len(round_ms), 3),
        max_round_ms=round(max(round_ms), 3),
    )
