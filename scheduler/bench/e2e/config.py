"""What one end-to-end benchmark run does."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

SchedulerKind = Literal["tessera", "kube-scheduler"]
SCHEDULERS: tuple[SchedulerKind, ...] = ("tessera", "kube-scheduler")

# scheduler_perf's client settings (test/integration/scheduler_perf: rest config QPS 5000, burst 5000).
CLIENT_QPS = 5000
CLIENT_BURST = 5000


@dataclass(frozen=True)
class E2EConfig:
    nodes: int = 100
    gpus_per_node: int = 8
    pods: int = 500
    scheduler: SchedulerKind = "tessera"
    fraction_share: float = 0.0  # share of the pods asking for `fraction` of one GPU (the others: 1 GPU)
    fraction: float = 0.5
    cpu_only_share: float = 0.0  # share of the pods asking for no GPU (CPU and memory only)
    gang_size: int = 0  # > 1: every pod is a member of a gang of this size (one GPU each)
    rate: float = 0.0  # pods created per second; 0: as fast as the client can (a burst)
    preload: bool = False  # all pods created before the scheduler starts (a backlog to drain)
    kubeconfig: str | None = None  # an API server already running (else one is started)
    timeout_s: float = 600.0
    stall_s: float = 60.0  # give up when no pod was bound for this long
    creators: int = 8  # client threads creating pods
    bind_workers: int = 8  # Tessera's binder threads
    min_cycle_gap_s: float = 0.05  # Tessera's shortest time between cycles
    policy: str = ""  # Tessera's placement policy ('' = its default)
    # Tessera's device plugin serves whole GPUs on the nodes (the chart's default): whole-GPU pods wait for
    # it after their bind as fractions do; False: NVIDIA's plugin serves them (`--whole-gpu-resource ""`).
    whole_gpu_plugin: bool = True
    # The affinity workload (load.py): anti-affinity Deployments, zone spread, node affinity by GPU model,
    # on nodes in three zones of two GPU models; every pod bound is checked with kube-scheduler's own filters
    affinity: bool = False
    profile: str | None = None  # py-spy flame graph of the scheduler process (an .svg path)

    @property
    def kind_of_pods(self) -> str:
        if self.affinity:
            return "1 GPU: anti-affinity Deployments, zone spread, node affinity by GPU model"
        if self.gang_size > 1:
            return f"gangs of {self.gang_size} x 1 GPU"
        if self.fraction_share >= 1:
            return f"{self.fraction:g} GPU"
        if self.fraction_share > 0:
            return f"{self.fraction_share:.0%} at {self.fraction:g} GPU, the rest 1 GPU"
        return "1 GPU"

    def capacity(self) -> int:
        """How many of the pods fit the cluster (GPUs are the binding constraint)."""
        gpus = self.nodes * self.gpus_per_node
        if self.affinity:  # a third of the pods ask for the model half the nodes have
            return min(self.pods, gpus, (gpus // 2) * 3)
        frac = round(self.pods * self.fraction_share) if self.gang_size <= 1 else 0
        cpu_only = round(self.pods * self.cpu_only_share) if self.gang_size <= 1 else 0
        per_gpu = int(1 / self.fraction) if self.fraction > 0 else 1
        whole = self.pods - frac - cpu_only
        fits_whole = min(whole, gpus)
        left = gpus - fits_whole
        return cpu_only + fits_whole + min(frac, left * per_gpu)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("kubeconfig")
        out["reused_api_server"] = self.kubeconfig is not None
        return out


def check(cfg: E2EConfig) -> str | None:
    """Why this configuration cannot run, or None."""
    if cfg.scheduler == "kube-scheduler" and (cfg.fraction_share > 0 or cfg.gang_size > 1):
        return "kube-scheduler places whole GPUs only: fractions and gangs are measured for Tessera only"
    if not 0 <= cfg.fraction_share <= 1:
        return f"--fraction-share must be between 0 and 1, got {cfg.fraction_share:g}"
    if not 0 <= cfg.cpu_only_share <= 1 - cfg.fraction_share:
        return "the shares of fractional and CPU-only pods must add up to at most 1"
    if not 0 < cfg.fraction < 1:
        return f"--fraction must be between 0 and 1 (exclusive), got {cfg.fraction:g}"
    if cfg.gang_size > 1 and cfg.pods % cfg.gang_size:
        return f"--pods ({cfg.pods}) must be a multiple of --gang-size ({cfg.gang_size})"
    if cfg.gang_size > 1 and cfg.fraction_share > 0:
        return "gangs are of whole-GPU pods: use --gang-size or --fraction-share, not both"
    if cfg.affinity and (cfg.gang_size > 1 or cfg.fraction_share > 0):
        return "--affinity is its own workload of whole-GPU pods: not with --gang-size or --fraction-share"
    if cfg.affinity and cfg.nodes < 4:
        return "--affinity needs at least 4 nodes (its Deployments put 4 replicas on 4 nodes)"

    return None
