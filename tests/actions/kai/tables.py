"""KAI Scheduler's action test tables on Tessera's simulated cluster.

Each case (YAML under `cases/`, one file per KAI test file) is the cluster a KAI test builds: nodes, queues
(under KAI's implicit `default` department, or the departments it names), jobs with tasks running on given
nodes (and GPU groups) or pending, and what the action must leave. It is built as Kubernetes objects: the
running pods already bound, with their GPU assignments, so the scheduler accounts them as it would after a
restart; then the one action the KAI test executes runs for one cycle.

KAI's test harness in Tessera's terms:
- a job is a PodGroup of all its tasks (minMember: all of them, or `min_member`), its pods carry its
  priority; jobs listed first (after a stable sort by priority, highest first) are the oldest;
- a queue deserves 0 GPUs and has weight 0 unless it says so, CPU and memory unlimited; a department is a
  parent queue whose over-quota weight is its quota; queues listed first are the oldest;
- a node has 20000 CPUs, 20G of memory and GPUs of 100 MiB unless it says so; a pod asks 1 CPU and 1G
  (memory figures are scaled, see `_Memory`);
- a job's `started_s_ago` is when its running pods started (status.startTime) before the action runs: KAI's
  job LastStartTimestamp, which minimum runtimes are measured from (none: a running pod without a start);
- a case's `topologies` are Topology objects (name: node label keys, outermost first), a job's `topology`
  its PodGroup's topologyConstraint;
- statuses: `Running` (left as it was), `Releasing` (evicted, still terminating), `Pipelined` (a pending
  job placed where victims still terminate, or a running pod moved by consolidation: reserved elsewhere),
  `Allocated`/`Binding`/`Bound` (bound now), `Pending` (nothing happened).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.keys import (
    GPU_ASSIGNMENT,
    GPU_FRACTION,
    GPU_MEMORY,
    POD_GROUP,
    QUEUE_LABEL,
    WHOLE_GPU_RESOURCE,
)
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.sim.cluster import SIM_EPOCH, SimCluster
from scheduler.sim.loader import Manifests

CASES = Path(__file__).parent / "cases"
NS = "kai"
GPU_MODEL = "KAI-GPU"
DEFAULT_GPU_MIB = 100  # KAI's test nodes' GPU memory
PLACED = {"Allocated", "Binding", "Bound"}


def load_cases() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(CASES.glob("*_test.yaml")):
        out += yaml.safe_load(path.read_text()) or []
    return out


def _node(name: str, spec: dict[str, Any], mem: _Memory) -> dict[str, Any]:
    labels = {
        "nvidia.com/gpu.product": GPU_MODEL,
        "nvidia.com/gpu.memory": str(spec.get("gpu_memory_mib", DEFAULT_GPU_MIB)),
    }
    labels.update(spec.get("labels") or {})
    capacity = {"cpu": _qty(spec.get("cpu", 20000)), "memory": mem(spec.get("memory", 20e9)),
                "nvidia.com/gpu": str(spec.get("gpus", 0))}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": capacity}}  # fmt: skip


def _qty(v: Any) -> str:
    """A quantity as KAI's harness writes it (a number of units, or a string such as "20G")."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


@dataclass(frozen=True)
class _Memory:
    """KAI's test memory figures are bytes, from 500 to 20G in one table: Tessera counts whole MiB (and
    bounds a quantity at 1 PiB), so a case's figures are all divided by the largest power of ten that
    divides them all and written as MiB. Every comparison between them comes out as in KAI."""

    divisor: int

    @classmethod
    def of(cls, case: dict[str, Any]) -> _Memory:
        values = [s.get("memory", 20e9) for s in case["nodes"].values()]
        values += [j.get("memory", 1e9) for j in case["jobs"]]
        for q in [*case["queues"], *(case.get("departments") or [])]:
            values += [q[k] * 1e6 for k in ("memory_quota", "memory_limit") if q.get(k, -1) >= 0]
        k = 6
        while k and any(int(v) % 10**k for v in values):
            k -= 1
        return cls(10**k)

    def __call__(self, nbytes: float) -> str:
        return f"{int(nbytes) // self.divisor}Mi"


def _resource(quota: float, weight: float, limit: float | None) -> dict[str, float]:
    return {"quota": quota, "overQuotaWeight": weight, "limit": -1 if limit is None else limit}


def _queue(
    name: str, parent: str | None, index: int, gpu: dict[str, float], q: dict[str, Any], mem: _Memory
) -> dict[str, Any]:
    unlimited = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    cpu = dict(unlimited)
    if "cpu_quota" in q:  # KAI's CPU quota is in millicores
        cpu["quota"] = f"{q['cpu_quota']:g}m" if q["cpu_quota"] >= 0 else -1
    if "cpu_limit" in q:
        cpu["limit"] = f"{q['cpu_limit']:g}m" if q["cpu_limit"] >= 0 else -1
    memory = dict(unlimited)
    if "memory_quota" in q:  # in MB
        memory["quota"] = mem(q["memory_quota"] * 1e6) if q["memory_quota"] >= 0 else -1
    if "memory_limit" in q:
        memory["limit"] = mem(q["memory_limit"] * 1e6) if q["memory_limit"] >= 0 else -1
    spec: dict[str, Any] = {
        "priority": q.get("priority", 100),
        "resources": {"gpu": gpu, "cpu": cpu, "memory": memory},
    }
    if parent:
        spec["parentQueue"] = parent
    for key, field_name in (
        ("preempt_min_runtime", "preemptMinRuntime"),
        ("reclaim_min_runtime", "reclaimMinRuntime"),
    ):
        if key in q:
            spec[field_name] = q[key]
    created = (SIM_EPOCH + timedelta(minutes=index)).isoformat()
    return {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": name, "creationTimestamp": created}, "spec": spec}  # fmt: skip


@dataclass
class _GPUs:
    """Who holds what on each node's GPUs while the running tasks are laid out."""

    count: dict[str, int]
    memory: dict[str, int]
    used: dict[tuple[str, int], int] = field(default_factory=dict)
    groups: dict[tuple[str, str], int] = field(default_factory=dict)

    def whole(self, node: str, n: int) -> list[int]:
        free = [i for i in range(self.count[node]) if self.used.get((node, i), 0) == 0][:n]
        for i in free:
            self.used[(node, i)] = 1000
        return free

    def share(self, node: str, milli: int, group: str | None) -> int:
        """The GPU a fractional task takes: its group's (a fresh GPU for a new group), else the first with room."""
        if group is not None:
            if (node, group) not in self.groups:
                taken = {i for (n, _), i in self.groups.items() if n == node}
                self.groups[(node, group)] = next(
                    i for i in range(self.count[node]) if i not in taken and self.used.get((node, i), 0) == 0
                )
            index = self.groups[(node, group)]
        else:
            index = next(i for i in range(self.count[node]) if self.used.get((node, i), 0) + milli <= 1000)
        self.used[(node, index)] = self.used.get((node, index), 0) + milli
        return index


def build(case: dict[str, Any]) -> tuple[SimCluster, Scheduler, dict[str, list[str]], float]:
    """The case's cluster, a scheduler running only its action, each job's pod keys, and the time to run at."""
    m = Manifests()
    mem = _Memory.of(case)
    nodes = case["nodes"]
    for name, spec in nodes.items():
        m.objects["Node"].append(_node(name, spec, mem))
    departments = case.get("departments") or [{"name": "default", "quota": -1}]
    for i, d in enumerate(departments):
        weight = d["quota"] if d["quota"] > 0 else 1
        m.objects["Queue"].append(
            _queue(d["name"], None, i, _resource(d["quota"], weight, d.get("limit")), d, mem)
        )
    for i, q in enumerate(case["queues"]):
        parent = q.get("parent") or ("default" if not case.get("departments") else None)
        m.objects["Queue"].append(_queue(q["name"], parent, len(departments) + i,
                                         _resource(q["quota"], q["weight"], q.get("limit")), q, mem))  # fmt: skip
    for name, levels in (case.get("topologies") or {}).items():  # KAI's Topology objects: node label keys
        m.objects["Topology"].append({"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "Topology",
                                      "metadata": {"name": name},
                                      "spec": {"levels": [{"nodeLabel": lv} for lv in levels]}})  # fmt: skip
    gpus = _GPUs({n: s.get("gpus", 0) for n, s in nodes.items()},
                 {n: s.get("gpu_memory_mib", DEFAULT_GPU_MIB) for n, s in nodes.items()})  # fmt: skip
    jobs = sorted(case["jobs"], key=lambda j: -j["priority"])  # KAI's harness: stable, highest first
    ages = [j.get("age_minutes", len(jobs) - i) for i, j in enumerate(jobs)]
    oldest = max(ages, default=0)
    members: dict[str, list[str]] = {}
    for job, age in zip(jobs, ages, strict=True):
        arrival = float(oldest - age)
        group = {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": job["name"], "namespace": NS},
                 "spec": {"minMember": job.get("min_member", len(job["tasks"])), "queue": job["queue"]}}  # fmt: skip
        if "preemptibility" in job:
            group["spec"]["preemptibility"] = job["preemptibility"]
        if "topology" in job:  # {topology, requiredTopologyLevel, preferredTopologyLevel}
            group["spec"]["topologyConstraint"] = job["topology"]
        m.objects["PodGroup"].append(group)
        members[job["name"]] = []
        for i, task in enumerate(job["tasks"]):
            pod = _pod(job, i, task, arrival, gpus, mem)
            if "started_s_ago" in job and task["state"] == "Running":  # KAI's LastStartTimestamp
                started = SIM_EPOCH + timedelta(seconds=oldest + 1.0 - job["started_s_ago"])
                pod["status"]["startTime"] = started.isoformat()
            members[job["name"]].append(f"{NS}/{pod['metadata']['name']}")
            m.objects["Pod"].append(pod)
    sim = SimCluster.from_manifests(m)
    most = max([s.get("gpus", 0) for s in nodes.values()] + [8])
    config = SchedulerConfig(policy="binpack", backend="numpy", actions=(case["action"],), max_gpus_per_node=most,
                             expected_nodes=max(len(nodes), 4))  # fmt: skip
    return sim, Scheduler(sim, config), members, oldest + 1.0


def _pod(
    job: dict[str, Any], i: int, task: dict[str, Any], arrival: float, gpus: _GPUs, mem: _Memory
) -> dict[str, Any]:
    annotations = {"tessera.dev/sim-arrival": f"{arrival:g}s", POD_GROUP: job["name"]}
    requests = {"cpu": _qty(job.get("cpu", 1)), "memory": mem(job.get("memory", 1e9))}
    limits: dict[str, str] = {}
    per_task = task.get("gpus", job.get("gpus", 0))
    fraction = 0 < per_task < 1
    if job.get("gpu_memory_mib"):
        annotations[GPU_MEMORY] = str(job["gpu_memory_mib"])
    elif fraction:
        annotations[GPU_FRACTION] = f"{per_task:g}"
    elif per_task:
        limits[WHOLE_GPU_RESOURCE] = str(int(per_task))
    name = f"{job['name']}-{i}"
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {QUEUE_LABEL: job["queue"]}, "annotations": annotations},
        "spec": {"schedulerName": "tessera", "priority": job["priority"], "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "main", "resources": {"requests": requests, "limits": limits}}]},
    }  # fmt: skip
    if task["state"] in ("Running", "Releasing"):
        node = task["node"]
        groups = task.get("gpu_groups") or [None]
        shares: list[AssignedGPU] = []
        if job.get("gpu_memory_mib"):
            mib = int(job["gpu_memory_mib"])
            milli = math.ceil(mib * 1000 / gpus.memory[node])
            shares = [AssignedGPU(index=gpus.share(node, milli, groups[0]), uuid=f"GPU-{node}-x", milli=milli,
                                  memory_mib=mib)]  # fmt: skip
        elif fraction:
            milli = round(per_task * 1000)
            index = gpus.share(node, milli, groups[0])
            shares = [AssignedGPU(index=index, uuid=f"GPU-{node}-{index}", milli=milli,
                                  memory_mib=milli * gpus.memory[node] // 1000)]  # fmt: skip
        elif per_task:
            shares = [AssignedGPU(index=j, uuid=f"GPU-{node}-{j}", milli=1000, memory_mib=gpus.memory[node])
                      for j in gpus.whole(node, int(per_task))]  # fmt: skip
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running"}
        if shares:
            annotations[GPU_ASSIGNMENT] = GPUAssignment(node=node, gpus=shares).to_annotation()
        if task["state"] == "Releasing":
            pod["metadata"]["deletionTimestamp"] = SIM_EPOCH.isoformat()
    return pod


def outcome(sim: SimCluster, sched: Scheduler, key: str, was: str) -> tuple[str, str | None]:
    """(status in KAI's words, node) of one pod after the cycle."""
    rec = sim.pods.get(key)
    ledger = sched.cache.ledger
    if rec is None:
        return ("Gone", None)
    node = (rec.obj.get("spec") or {}).get("nodeName")
    reservation = ledger.reservations().get(key)
    if rec.deleting is not None or (was == "Releasing"):
        if reservation is not None and reservation.uid is None:  # moved by consolidation: reserved elsewhere
            return ("Pipelined", sim_node(sched, reservation.placement.node))
        return ("Releasing", node)
    if was == "Pending":
        if reservation is not None:
            return ("Pipelined", sim_node(sched, reservation.placement.node))
        if node:
            return ("Bound", node)
        return ("Pending", None)
    return ("Running", node)


def sim_node(sched: Scheduler, row: int) -> str:
    return str(sched.cache.state.node_names[row])
