"""`tessera bench failover` through a real kube-apiserver (see `scheduler/bench/failover.py` for what is
measured and checked).

The world of `tessera bench e2e` (the control plane, N Node objects, the chart's RBAC): M pods created
through the API, 1/8 of the GPUs left free (whole-GPU pods for 7/8 of them, the rest CPU-only), bound by a
first Tessera process. Once it holds all of them (its queue gauge says so) it is SIGKILLed, a pod of one
GPU is created, and a second process started: its start to `/readyz` (the watch caches listed) and to the
watch showing that pod's node. The first process's queue and per-GPU gauges just before the kill are
compared with the second's after that bind, and the pods' own assignments (read back from the API server)
with the second's per-GPU gauges: what the new scheduler believes is what the pods say.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from prometheus_client.parser import text_string_to_metric_families

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT
from scheduler.bench.e2e.config import E2EConfig
from scheduler.bench.e2e.load import BindWatch, Creator, pod_body
from scheduler.bench.e2e.measure import cpu_seconds, memory_mib
from scheduler.bench.e2e.runner import open_world
from scheduler.bench.e2e.schedulers import SchedulerProcess
from scheduler.bench.e2e.world import BenchWorld
from scheduler.bench.failover import PROBE, PROBE_QUEUE, FailoverConfig, GpuUse, Usage, restart_findings
from scheduler.kube import raw

Say = Callable[[str], None]
# The API probe: one whole GPU, 1 core, 1 GiB (`pod_body`); what it adds to its queue.
API_PROBE_REQUEST = {"gpu": 1.0, "cpu": 1000.0, "memory": 1024.0}


def e2e_config(cfg: FailoverConfig, kubeconfig: str | None, timeout_s: float) -> E2EConfig:
    gpu_pods = min(cfg.pods, cfg.nodes * cfg.gpus_per_node * 7 // 8)
    return E2EConfig(
        nodes=cfg.nodes, gpus_per_node=cfg.gpus_per_node, pods=cfg.pods, preload=True, policy=cfg.policy,
        cpu_only_share=1 - gpu_pods / cfg.pods, kubeconfig=kubeconfig, timeout_s=timeout_s,
    )  # fmt: skip


def gauges(text: str) -> tuple[Usage, GpuUse]:
    """The queue gauges (queue, resource) and the per-GPU ones (node, index) -> milli of /metrics."""
    usage: Usage = {}
    gpus: GpuUse = {}
    for family in text_string_to_metric_families(text):
        if family.name == "tessera_queue_allocated":
            for s in family.samples:
                usage[(s.labels["queue"], s.labels["resource"])] = float(s.value)
        elif family.name == "tessera_gpu_allocated_fraction":
            for s in family.samples:
                milli = round(float(s.value) * 1000)
                if milli:
                    gpus[(s.labels["node"], int(s.labels["gpu"]))] = milli
    return usage, gpus


def pods_gpu_use(world: BenchWorld) -> GpuUse:
    """(node, GPU index) -> milli, from the bound pods' assignments as the API server has them."""
    out: GpuUse = {}
    api = world.api_client()
    cont = ""
    while True:
        query = f"?limit=5000&continue={quote(cont, safe='')}" if cont else "?limit=5000"
        body = raw.request(api, "GET", f"/api/v1/namespaces/{world.namespace}/pods{query}")
        for pod in body.get("items") or []:
            note = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_ASSIGNMENT)
            if note and (pod.get("spec") or {}).get("nodeName"):
                a = GPUAssignment.from_annotation(note)
                for g in a.gpus:
                    out[(a.node, g.index)] = out.get((a.node, g.index), 0) + g.milli
        cont = str((body.get("metadata") or {}).get("continue") or "")
        if not cont:
            return out


def _wait(what: str, done: Callable[[], bool], timeout_s: float, poll_s: float = 0.5) -> None:
    deadline = time.perf_counter() + timeout_s
    while not done():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what}: not after {timeout_s:.0f} s")
        time.sleep(poll_s)


def run_failover_api(
    cfg: FailoverConfig, *, kubeconfig: str | None = None, timeout_s: float = 1800.0, say: Say | None = None
) -> dict[str, Any]:
    progress = say or (lambda _msg: None)
    e2e = e2e_config(cfg, kubeconfig, timeout_s)
    world = open_world(e2e, progress)
    old = new = None
    watch: BindWatch | None = None
    try:
        world.create_namespace()
        watch = BindWatch(world.api_client(), world.namespace).start()
        creator = Creator(world.api_client(connections=e2e.creators + 4), world.namespace, e2e)
        progress(f"creating {cfg.pods} pods")
        creator.run()
        if creator.errors:
            raise RuntimeError(f"{len(creator.errors)} pods could not be created: {creator.errors[0]}")
        progress("the first scheduler binds them")
        t_bind = time.perf_counter()
        old = SchedulerProcess(e2e, world.kubeconfig_for("tessera"), world.workdir).start()
        _wait("the first scheduler binding every pod", lambda: watch.count() >= cfg.pods, timeout_s)
        bind_s = time.perf_counter() - t_bind
        gpu_pods = round(cfg.pods * (1 - e2e.cpu_only_share))

        def settled() -> bool:
            usage, _ = gauges(old.metrics())
            return round(usage.get((PROBE_QUEUE, "gpu"), 0.0)) == gpu_pods

        _wait("the first scheduler's queue gauge", settled, 120)
        before, before_gpus = gauges(old.metrics())
        old_memory = memory_mib(old.pid)
        old.kill()

        progress("killed; a pod created, the second scheduler starts")
        raw.request(world.api_client(), "POST", f"/api/v1/namespaces/{world.namespace}/pods",
                    pod_body(e2e, PROBE, fraction=False, group=None))  # fmt: skip
        t0 = time.perf_counter()
        new = SchedulerProcess(e2e, world.kubeconfig_for("tessera"), world.workdir)
        new.start(timeout_s=timeout_s, poll_s=0.02)
        synced_s = time.perf_counter() - t0
        _wait("the pod created after the kill bound", lambda: PROBE in watch.bound, timeout_s, poll_s=0.01)
        first_bind_s = watch.bound[PROBE] - t0
        cpu_s = cpu_seconds(new.pid)
        probe_node = watch.nodes[PROBE]

        def counted() -> bool:
            """Its gauges are written after the cycle that bound the probe, every GPU's after its first cycle
            (one at a time: a scrape may come half-way through, so until all are there)."""
            text = new.metrics()
            usage, _ = gauges(text)
            series = text.count("\ntessera_gpu_allocated_fraction{")
            return (
                usage.get((PROBE_QUEUE, "gpu"), 0.0) >= before.get((PROBE_QUEUE, "gpu"), 0.0) + 1
                and series >= cfg.nodes * cfg.gpus_per_node
            )

        _wait("the second scheduler's queue gauge", counted, 60)
        after, after_gpus = gauges(new.metrics())
        from_pods = pods_gpu_use(world)
        probe_gpus = {k: 1000 for k in from_pods if k[0] == probe_node and k not in before_gpus}
        findings = restart_findings(before, after, API_PROBE_REQUEST, before_gpus, after_gpus, probe_gpus)
        over = sorted(k for k, milli in from_pods.items() if milli > 1000)
        if over:
            findings.append(f"{len(over)} GPUs over-committed by the pods' assignments, first {over[0]}")
        if from_pods != after_gpus:
            differ = sorted(
                k for k in set(from_pods) | set(after_gpus) if from_pods.get(k) != after_gpus.get(k)
            )
            findings.append(f"{len(differ)} GPUs: the new scheduler's gauges differ from the pods' assignments, "
                            f"first {differ[0]}: {after_gpus.get(differ[0], 0)} vs {from_pods.get(differ[0], 0)}")  # fmt: skip
        return {
            "path": "kube-apiserver",
            "config": {**dataclasses.asdict(cfg), "gpu_pods": gpu_pods, "cpu_only_pods": cfg.pods - gpu_pods},
            "create_pods_per_s": round(len(creator.created) / max(creator.last_s - creator.first_s, 1e-9), 1),
            "first_scheduler_bind_s": round(bind_s, 2),
            "first_scheduler_memory_mib": old_memory,
            "synced_s": round(synced_s, 3),
            "first_bind_s": round(first_bind_s, 3),
            "scheduler_cpu_s": cpu_s,
            "scheduler_memory_mib": memory_mib(new.pid),
            "probe_node": probe_node,
            "invariants_hold": not findings,
            "findings": findings,
            "queues": {f"{q}/{r}": v for (q, r), v in sorted(before.items()) if v},
        }
    finally:
        for proc in (new, old):
            if proc is not None:
                proc.stop()
        if watch is not None:
            watch.stop()
        world.delete_pods()
        world.stop()
