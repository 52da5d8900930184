"""`tessera bench handoff`: the scheduler's own cost of a burst of fractions under the device plugin's
hand-off (DESIGN.md step 3), against the same burst of whole GPUs, in one process and one run.

`tessera bench e2e --fraction-share 1.0` measures the rate through a real API server; on a machine of two
shared cores that rate is bound by the API server's and etcd's CPU (each fraction costs a second write, the
plugin's mark), so it cannot tell what the scheduler itself spends. This does: the cluster is the
benchmark's in-memory one (`BenchCluster`), a bind leaves the pod bound and Pending (its kubelet has not
admitted it), and after every cycle the benchmark's "device plugin" marks at most `marks_per_cycle` of
the pods waiting for `Allocate`, oldest first, as a plugin answering the kubelet one pod at a time would.
Only `Scheduler.run_cycle` is timed (CPU seconds): the fractions need a cycle per turn of every node (at
most one pod per node waits for `Allocate`), the whole GPUs (which NVIDIA's plugin serves here, no
hand-off) are placed in one.

Checked on the way, every cycle: no node has two pods waiting for `Allocate`; at the end: every pod bound
and the GPUs used as the whole-GPU shape says (fractions of `1/k` fill `pods/k` GPUs, none part used).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT, MILLI_PER_GPU
from scheduler.bench.cluster import BenchCluster
from scheduler.bench.runner import backend_label
from scheduler.bench.workload import PodShape, make_nodes, pod_object
from scheduler.cache.cluster import BindResult, WatchEvent
from scheduler.cache.handoff import HandoffRule
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.types import PodInfo
from scheduler.placement.registry import DEFAULT_POLICY

Obj = dict[str, Any]


@dataclass(frozen=True)
class HandoffConfig:
    nodes: int = 100
    gpus_per_node: int = 8
    pods: int = 500
    fraction: float = 0.5  # of one GPU, each pod of the fraction burst
    marks_per_cycle: int = 8  # pods the plugin marks allocated between two cycles
    policy: str | None = None  # None: the scheduler's default
    backend: str | None = None


class PluginCluster(BenchCluster):
    """`BenchCluster` whose binds leave the pod bound and Pending until `mark` (the device plugin's
    `tessera.dev/gpu-allocated`) and then Running, as a kubelet that admitted it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[str] = []  # pods bound and not marked, in bind order

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> BindResult:
        result = super().bind(pod, assignment)
        obj = self.pods[pod.key]
        if pod.request.is_fractional:  # Tessera's plugin serves it: Pending until its Allocate is done
            obj["status"] = {"phase": "Pending"}  # the event just queued carries this same object
            self.waiting.append(pod.key)
        return result

    def mark(self, count: int) -> int:
        """The plugin marks the `count` oldest pods waiting allocated (and their kubelet starts them)."""
        done, self.waiting = self.waiting[:count], self.waiting[count:]
        for key in done:
            obj = self.pods[key]
            meta = {**obj["metadata"], "annotations": {**obj["metadata"]["annotations"], GPU_ALLOCATED: "{}"}}
            marked = {**obj, "metadata": meta, "status": {"phase": "Running"}}
            self.pods[key] = marked
            self._events.append(WatchEvent("Pod", "MODIFIED", marked))
        return len(done)


def _burst(cfg: HandoffConfig, fractional: bool) -> dict[str, Any]:
    cluster = PluginCluster()
    for node in make_nodes(cfg.nodes, cfg.gpus_per_node):
        cluster.create("Node", node)
    milli = round(cfg.fraction * MILLI_PER_GPU)
    shape = PodShape(1, milli=milli) if fractional else PodShape(1, gpus=1)
    config = SchedulerConfig(backend=cfg.backend, handoff=HandoffRule(), policy=cfg.policy or DEFAULT_POLICY)
    sched = Scheduler(cluster, config)
    sched.run_cycle()  # the nodes, before the burst
    for i in range(cfg.pods):
        cluster.create("Pod", pod_object(f"p-{i:06d}", shape))
    cycles, cpu_s, most_waiting, idle = 0, 0.0, 0, 0
    t0 = time.perf_counter()
    while (len(cluster.bound_at) < cfg.pods or cluster.waiting) and idle < 3:
        before = len(cluster.bound_at)
        c0 = time.process_time()
        sched.run_cycle()
        cpu_s += time.process_time() - c0
        cycles += 1
        per_node = Counter(cluster.pods[k]["spec"]["nodeName"] for k in cluster.waiting)
        most_waiting = max(most_waiting, max(per_node.values(), default=0))
        marked = cluster.mark(cfg.marks_per_cycle)
        idle = 0 if marked or len(cluster.bound_at) > before else idle + 1  # stuck: reported, not looped
    wall_s = time.perf_counter() - t0
    # The GPUs as the bound pods' assignments say (the cluster's view, not the scheduler's own arrays).
    used: Counter[tuple[str, int]] = Counter()
    for obj in cluster.pods.values():
        text = obj["metadata"].get("annotations", {}).get(GPU_ASSIGNMENT)
        if text:
            a = GPUAssignment.from_annotation(text)
            used.update({(a.node, g.index): g.milli for g in a.gpus})
    return {
        "bound": len(cluster.bound_at),
        "cycles": cycles,
        "scheduler_cpu_s": round(cpu_s, 4),
        "cpu_ms_per_pod": round(1000 * cpu_s / max(1, len(cluster.bound_at)), 3),
        "pods_per_scheduler_cpu_s": round(len(cluster.bound_at) / cpu_s, 1) if cpu_s else 0.0,
        "wall_s": round(wall_s, 3),
        "most_waiting_on_a_node": most_waiting,
        "gpus_used": sum(1 for u in used.values() if u > 0),
        "gpus_partly_used": sum(1 for u in used.values() if 0 < u < MILLI_PER_GPU),
        "backend": backend_label(sched.cache.state.xp),
    }


def run_handoff(cfg: HandoffConfig) -> dict[str, Any]:
    """The whole-GPU burst, then the fraction burst; the ratio of their pods per scheduler CPU-second."""
    whole = _burst(cfg, fractional=False)
    fractions = _burst(cfg, fractional=True)
    return {
        "config": {
            "nodes": cfg.nodes,
            "gpus_per_node": cfg.gpus_per_node,
            "pods": cfg.pods,
            "fraction": cfg.fraction,
            "marks_per_cycle": cfg.marks_per_cycle,
            "policy": cfg.policy or DEFAULT_POLICY,
        },
        "fractions": fractions,
        "whole_gpus": whole,
        # Scheduler CPU per whole-GPU pod over that per fraction: 1.0 is "a fraction costs the scheduler
        # what a whole GPU does"; the hand-off's extra cycles are what keeps it below.
        "fraction_to_whole_cpu": round(whole["scheduler_cpu_s"] / fractions["scheduler_cpu_s"], 3)
        if fractions["scheduler_cpu_s"]
        else 0.0,
    }
