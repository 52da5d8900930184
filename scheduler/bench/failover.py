"""`tessera bench failover`: how long a new scheduler leaves the cluster unscheduled after the old one dies.

A cluster of N nodes with M running pods, bound by the scheduler that is then killed; a pod is created
just after. Measured from the new scheduler's start: (a) its cache synced (every object listed and
accounted), (b) its first bind, of that pod. The restart-safety invariants (issue 27) are checked on the
way: the new scheduler holds exactly what the old one held (per queue and resource, and per GPU) plus
the new pod, and no GPU is over-committed.

Two paths share the checks here:

* through a real kube-apiserver (`scheduler/bench/e2e/failover.py`): the pods created through the API
  and bound by a first Tessera process, which is SIGKILLed; the second is a process of its own;
* in memory (`run_failover_in_memory`, this module), for sizes the API server of this machine cannot
  hold: the running pods as a relist delivers them (`tessera bench events`' world, each with its
  assignment), a first `Scheduler` that accounts them, then a fresh one on the same objects.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.bench.cluster import BenchCluster
from scheduler.bench.events import EventsConfig, running_pods
from scheduler.bench.runner import backend_label, peak_rss_mib, settle_heap
from scheduler.bench.workload import PodShape, make_nodes, pod_object
from scheduler.cache.handoff import HandoffRule
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.placement.registry import DEFAULT_POLICY

Usage = dict[tuple[str, str], float]  # (queue, resource) -> allocated (GPUs, CPU millicores, memory MiB)
GpuUse = dict[tuple[str, int], int]  # (node, GPU index) -> milli held
PROBE = "failover-probe"
PROBE_QUEUE = "default"
# The in-memory probe: 0.1 GPU, 1 core and 4 GiB (as `pod_object` writes it); the running pods leave no
# whole GPU free there. What it adds to its queue (GPUs, millicores, MiB):
PROBE_SHAPE = PodShape(1, milli=100)
PROBE_REQUEST = {"gpu": 0.1, "cpu": 1000.0, "memory": 4096.0}


@dataclass(frozen=True)
class FailoverConfig:
    nodes: int = 1000
    gpus_per_node: int = 8
    pods: int = 30_000
    policy: str = DEFAULT_POLICY
    backend: str | None = None
    seed: int = 1


def restart_findings(
    before: Usage, after: Usage, probe: Mapping[str, float], before_gpus: GpuUse, after_gpus: GpuUse,
    probe_gpus: GpuUse,
) -> list[str]:  # fmt: skip
    """What breaks the restart invariants: the new scheduler must hold what the old one held, per queue
    and resource and per GPU, plus exactly the probe pod (its `probe` request in `PROBE_QUEUE`, its milli
    on `probe_gpus`), and no GPU above 1000 milli. Empty when they hold."""
    found: list[str] = []
    for queue, resource in sorted(set(before) | set(after)):
        want = before.get((queue, resource), 0.0) + (
            probe.get(resource, 0.0) if queue == PROBE_QUEUE else 0.0
        )
        got = after.get((queue, resource), 0.0)
        if abs(got - want) > 1e-6 * max(1.0, abs(want)):
            found.append(f"queue {queue} {resource}: {got:g} held after the restart, {want:g} expected")
    over = sorted(k for k, milli in after_gpus.items() if milli > 1000)
    if over:
        found.append(
            f"{len(over)} GPUs over-committed, first {over[0][0]}/{over[0][1]}: {after_gpus[over[0]]}"
        )
    moved = [k for k in sorted(set(before_gpus) | set(after_gpus))
             if after_gpus.get(k, 0) != before_gpus.get(k, 0) + probe_gpus.get(k, 0)]  # fmt: skip
    if moved:
        k = moved[0]
        found.append(f"{len(moved)} GPUs hold other shares than before the restart, first {k[0]}/{k[1]}: "
                     f"{before_gpus.get(k, 0)} -> {after_gpus.get(k, 0)} milli")  # fmt: skip
    return found


def _usage(sched: Scheduler) -> Usage:
    session = sched.last_session
    assert session is not None
    return {(name, r): float(node.allocated.get(r)) for name, node in session.tree.nodes.items()
            for r in ("gpu", "cpu", "memory")}  # fmt: skip


def _gpu_use(sched: Scheduler) -> GpuUse:
    state = sched.cache.state
    free = state.host(state.free_milli)
    out: GpuUse = {}
    for row, node in enumerate(state.nodes):
        if node is None:
            continue
        for g in range(node.gpu_count):
            used = 1000 - int(free[row, g])
            if used:
                out[(node.name, g)] = used
    return out


def _world(cfg: FailoverConfig, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> BenchCluster:
    """What a new scheduler lists: every node and pod (a relist delivers them in one burst)."""
    cluster = BenchCluster()
    for obj in nodes:
        cluster.create("Node", obj)
    for obj in pods:
        cluster.create("Pod", obj)
    return cluster


def run_failover_in_memory(cfg: FailoverConfig) -> dict[str, Any]:
    nodes = make_nodes(cfg.nodes, cfg.gpus_per_node)
    pods, _ = running_pods(EventsConfig(nodes=cfg.nodes, gpus_per_node=cfg.gpus_per_node, pods=cfg.pods,
                                        seed=cfg.seed), nodes)  # fmt: skip
    # As the scheduler runs on a cluster (kube/runner.py): bound pods wait for Tessera's device plugin.
    sched_cfg = SchedulerConfig(policy=cfg.policy, backend=cfg.backend, max_gpus_per_node=cfg.gpus_per_node,
                                expected_nodes=cfg.nodes, handoff=HandoffRule())  # fmt: skip
    # The old leader: it holds every running pod.
    old = Scheduler(_world(cfg, nodes, pods), sched_cfg)
    old.run_cycle()
    before, before_gpus = _usage(old), _gpu_use(old)
    del old
    gc.collect()

    # Killed; a pod is created; the new one starts and lists the world.
    cluster = _world(cfg, nodes, pods)
    cluster.create("Pod", pod_object(PROBE, PROBE_SHAPE))
    settle_heap()
    t0 = time.perf_counter()
    c0 = time.process_time()
    new = Scheduler(cluster, sched_cfg)
    new.cache.apply(cluster.drain_events())  # what the first cycle does first: the cache synced
    synced_s = time.perf_counter() - t0
    result = new.run_cycle()
    first_bind_s = time.perf_counter() - t0
    cpu_s = time.process_time() - c0
    probe_key = f"bench/{PROBE}"
    probe_obj = cluster.pods[probe_key]
    node = probe_obj["spec"].get("nodeName")
    held = new.cache.placements.get(f"uid-{PROBE}")
    probe_gpus = {(node, g.slot): g.milli for g in held.gpus} if node and held else {}
    findings = restart_findings(before, _usage(new), PROBE_REQUEST, before_gpus, _gpu_use(new), probe_gpus)
    if not node:
        findings.insert(
            0, f"the pod created after the kill was not bound: {cluster.pending_reasons.get(probe_key)}"
        )
    return {
        "path": "in-memory",
        "config": dataclasses.asdict(cfg),
        "backend": backend_label(new.xp),
        "running_pods": len(pods),
        "accounted": len(new.cache.placements) - (1 if node else 0),
        "synced_s": round(synced_s, 3),
        "first_bind_s": round(first_bind_s, 3),
        "first_cycle_s": round(result.duration_s, 3),
        "cpu_s": round(cpu_s, 3),
        "invariants_hold": not findings,
        "findings": findings,
        "queues": {f"{q}/{r}": v for (q, r), v in sorted(before.items()) if v},
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }
