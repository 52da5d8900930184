"""Builders for topology tests: labelled nodes, Topology objects, pinned running pods and a constrained gang,
run through the real scheduling loop on the simulated cluster."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.api.keys import POD_GROUP
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.sim.builtin import pod, podgroup, queue
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import Manifests
from tests.framework.helpers import assignment, phase

Obj = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"
FOREVER = 10**7  # seconds: pods that never finish in a test


def topology(name: str, *levels: str, aliases: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "scheduling.tessera.dev/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {
            "levels": [
                {"nodeLabel": lv, **({"alias": aliases[lv]} if aliases and lv in aliases else {})}
                for lv in levels
            ]
        },
    }


def gpu_node(name: str, gpus: int, labels: dict[str, str], *, cpu: str = "64") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                HOSTNAME: name, "nvidia.com/gpu.product": "A100", "nvidia.com/gpu.memory": "40960", **labels,
            },
        },
        "status": {"capacity": {"cpu": cpu, "memory": "512Gi", "nvidia.com/gpu": str(gpus)}},
    }  # fmt: skip


@dataclass
class Gang:
    name: str = "pending_job0"
    pods: int = 2
    gpus: int = 1
    cpu: str = "1"
    required: str | None = None
    preferred: str | None = None
    topology: str | None = "cluster-topology"
    selectors: dict[int, dict[str, str]] = field(default_factory=dict)  # pod index -> nodeSelector
    preemptible: bool = True


@dataclass
class World:
    sim: SimCluster
    sched: Scheduler
    gang: Gang

    def run(self, cycles: int = 1) -> None:
        for _ in range(cycles):
            self.sim.advance(self.sim.now_s + 1)
            self.sched.run_cycle()

    def key(self, i: int) -> str:
        return f"queue0/{self.gang.name}-{i}"

    def node_of(self, i: int) -> str | None:
        a = assignment(self.sim, self.key(i))
        return a.node if a is not None and phase(self.sim, self.key(i)) == "Running" else None

    def placement(self) -> dict[int, str | None]:
        return {i: self.node_of(i) for i in range(self.gang.pods)}

    def reason(self, i: int = 0) -> tuple[str, str] | None:
        return self.sim.pods[self.key(i)].reason


def constraint(g: Gang) -> Obj:
    c: Obj = {}
    if g.topology:
        c["topology"] = g.topology
    if g.required:
        c["requiredTopologyLevel"] = g.required
    if g.preferred:
        c["preferredTopologyLevel"] = g.preferred
    return c


def world(
    topologies: list[Obj],
    nodes: list[Obj],
    gang: Gang,
    *,
    running: list[tuple[str, str, int]] = (),  # type: ignore[assignment]
    policy: str = "binpack",
    backend: str = "numpy",
    extra: list[Obj] = (),  # type: ignore[assignment]
) -> World:
    """Running pods (name, node, GPUs) are bound in the first cycle; the gang arrives at t=5 and the
    world is run to t=6 (one cycle with the gang)."""
    m = Manifests()
    m.objects["Queue"].append(queue("queue0", None, -1))
    m.objects["Topology"].extend(topologies)
    m.objects["Node"].extend(nodes)
    for name, node, gpus in running:
        m.objects["Pod"].append(
            pod(
                name,
                "queue0",
                arrival_s=0,
                duration_s=FOREVER,
                gpus=gpus,
                cpu="1",
                node_selector={HOSTNAME: node},
            )
        )
    pg = podgroup(gang.name, "queue0", "queue0", gang.pods)
    pg["spec"]["topologyConstraint"] = constraint(gang)
    m.objects["PodGroup"].append(pg)
    for i in range(gang.pods):
        p = pod(
            f"{gang.name}-{i}", "queue0", arrival_s=5, duration_s=FOREVER, gpus=gang.gpus, cpu=gang.cpu,
            annotations={POD_GROUP: gang.name}, node_selector=gang.selectors.get(i),
            priority_class="train" if gang.preemptible else "build",
        )  # fmt: skip
        m.objects["Pod"].append(p)
    for obj in extra:
        m.objects[obj["kind"]].append(obj)
    sim = SimCluster.from_manifests(m)
    sched = Scheduler(sim, SchedulerConfig(policy=policy, backend=backend))
    w = World(sim, sched, gang)
    w.run(6)
    return w
