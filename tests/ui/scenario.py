"""A small simulated cluster whose GPU map is known exactly, for the UI tests."""

from __future__ import annotations

from scheduler.api.keys import GPU_FRACTION, POD_GROUP
from scheduler.api.report import GPUNodeReport
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import Manifests
from tests.framework.helpers import A100, T4, cluster, node, pod, podgroup, queue, run

LONG = 36_000.0  # nothing finishes during a test


def small_cluster() -> tuple[SimCluster, Scheduler]:
    """3 nodes (2 x 4 A100, 1 x 2 T4), queues org/{team-a,team-b}; after two cycles:
    team-a/half (0.5) and team-b/quarter (0.25) share one GPU, team-a/whole2 holds 2 GPUs;
    team-b/big (8 GPUs) and the gang team-b/ddp (3 x 4 GPUs) pend; team-a/bad has an invalid fraction."""
    objects = [
        node("a100-0", A100, 4, 64, 512),
        node("a100-1", A100, 4, 64, 512),
        node("t4-0", T4, 2, 32, 128),
        queue("org", None, 6),
        queue("team-a", "org", 4),
        queue("team-b", "org", 2, limit=20),
        pod("half", "team-a", arrival_s=0, duration_s=LONG, annotations={GPU_FRACTION: "0.5"}),
        pod("quarter", "team-b", arrival_s=0, duration_s=LONG, annotations={GPU_FRACTION: "0.25"}),
        pod("whole2", "team-a", arrival_s=0, duration_s=LONG, gpus=2),
        pod("big", "team-b", arrival_s=0, duration_s=LONG, gpus=8),
        pod("bad", "team-a", arrival_s=0, duration_s=LONG, annotations={GPU_FRACTION: "1.5"}),
        podgroup("ddp", "team-b", "team-b", 3),
        *[
            pod(f"ddp-{i}", "team-b", arrival_s=0, duration_s=LONG, gpus=4, annotations={POD_GROUP: "ddp"})
            for i in range(3)
        ],
    ]
    sim, sched = cluster(objects)
    run(sim, sched, cycles=2)
    return sim, sched


def report_for(node_name: str, gpus: int, *, used_mib: int, unhealthy: int | None = None) -> GPUNodeReport:
    """An NVML report as the node agent would publish it (what the tests say was measured)."""
    return GPUNodeReport.model_validate(
        {
            "metadata": {"name": node_name},
            "spec": {
                "node": node_name,
                "observedAt": "2026-01-01T00:00:02Z",
                "gpus": [
                    {
                        "index": i, "uuid": f"GPU-test-{node_name}-{i}", "model": "A100",
                        "memoryTotalMiB": 40960, "memoryUsedMiB": used_mib if i == 0 else 0,
                        "utilizationPct": 87.0 if i == 0 else 0.0, "temperatureC": 61, "powerW": 250,
                        "health": "Unhealthy" if i == unhealthy else "Healthy",
                        "healthReason": "Xid 79: GPU has fallen off the bus" if i == unhealthy else None,
                        "shares": [{"pod": "half", "namespace": "team-a", "milli": 500,
                                    "memoryLimitMiB": 20480, "memoryUsedMiB": used_mib}] if i == 0 else [],
                    }
                    for i in range(gpus)
                ],
            },
        }
    )  # fmt: skip


def big_cluster(nodes: int) -> Scheduler:
    """`nodes` idle 8-GPU nodes of two models, then one half-GPU pod per four nodes (spread apart)."""
    m = Manifests()
    for i in range(nodes):
        m.objects["Node"].append(node(f"gpu-{i:04d}", A100 if i % 3 else T4, 8, 64, 512))
    for i in range(nodes // 4):  # spread: a quarter of the nodes get one half-GPU pod each
        m.objects["Pod"].append(
            pod(f"p{i:04d}", "default", arrival_s=0, duration_s=LONG, annotations={"gpu-fraction": "0.5"})
        )
    sim = SimCluster.from_manifests(m)
    sched = Scheduler(sim, SchedulerConfig(backend="numpy", expected_nodes=nodes, policy="spread"))
    run(sim, sched)
    return sched
