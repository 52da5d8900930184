"""The dashboard's view-model: plain, frozen data that says what to draw, not where it came from.

A live scheduler, a finished simulation or a replay all become a `DashboardView`; the renderer only
ever sees this. Numbers keep the scheduler's units: GPU milli (1000 = one GPU), MiB, millicores.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Slice:
    """One pod's share of one GPU."""

    pod: str  # namespace/name
    queue: str
    milli: int
    mib: int
    gang: str | None = None
    protected: str = ""  # how long its job's minimum runtimes still protect it ("" when they do not)


@dataclass(frozen=True)
class PodUse:
    """What NVML saw one pod use on a GPU, against its limit."""

    pod: str
    used_mib: int
    limit_mib: int
    over_limit: bool = False


@dataclass(frozen=True)
class Measured:
    """A GPU as the node agent's NVML report saw it."""

    memory_used_mib: int
    memory_total_mib: int
    utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    observed_at: str = ""
    pods: tuple[PodUse, ...] = ()


@dataclass(frozen=True)
class GPUCell:
    index: int
    uuid: str
    total_mib: int
    free_milli: int
    healthy: bool
    slices: tuple[Slice, ...] = ()
    measured: Measured | None = None
    health_reason: str | None = None

    @property
    def used_milli(self) -> int:
        return sum(s.milli for s in self.slices)


@dataclass(frozen=True)
class NodeRow:
    name: str
    pool: str
    model: str
    schedulable: bool
    gpus: tuple[GPUCell, ...]
    # (topology, domain path down to its innermost level, e.g. "zone-1/rack-a/a-2"), per topology the node is in
    domains: tuple[tuple[str, str], ...] = ()

    @property
    def domain(self) -> str:
        """Its innermost domain in the first topology (by name), "" outside every topology."""
        return self.domains[0][1] if self.domains else ""


@dataclass(frozen=True)
class QueueFigures:
    """One resource of one queue. quota -1 = unlimited, limit -1 = none (KAI's meanings)."""

    quota: float
    fair_share: float
    allocated: float
    requested: float
    limit: float
    over_quota_weight: float


@dataclass(frozen=True)
class QueueView:
    name: str
    parent: str | None
    depth: int
    is_leaf: bool
    priority: int
    resources: dict[str, QueueFigures]  # gpu, cpu, memory
    min_runtime: str = ""  # its preempt/reclaim minimum runtimes, inherited ones named ("" when none)
    # Time-based fair share: recent usage per resource (share of the cluster over the window, decayed) and
    # the GPU share it held in each bucket of the window, oldest first (empty when the feature is off).
    recent_usage: dict[str, float] = field(default_factory=dict)
    usage_series: tuple[float, ...] = ()


@dataclass(frozen=True)
class PendingSubject:
    """A pending pod, or a gang whose pending members share one story."""

    kind: str  # pod | gang
    key: str  # namespace/name of the pod, or of the PodGroup
    queue: str
    pods: int
    request: str  # human-readable: "0.5 GPU", "4 whole GPUs x 4 pods"
    waiting_s: float | None = None
    note: str = ""  # e.g. an elastic gang's "elastic: 5 running, minMember 2"


@dataclass(frozen=True)
class PendingEntry:
    message: str
    subjects: tuple[PendingSubject, ...]

    @property
    def pods(self) -> int:
        return sum(s.pods for s in self.subjects)


@dataclass(frozen=True)
class PendingGroup:
    reason: str
    entries: tuple[PendingEntry, ...]

    @property
    def pods(self) -> int:
        return sum(e.pods for e in self.entries)


@dataclass(frozen=True)
class Totals:
    nodes: int
    gpus: int
    unhealthy_gpus: int
    allocated_milli: int
    stranded_milli: int  # free milli on partly used GPUs: idle, but in pieces
    running_pods: int
    pending_pods: int

    @property
    def allocated_pct(self) -> float:
        return 100.0 * self.allocated_milli / (self.gpus * 1000) if self.gpus else 0.0


@dataclass(frozen=True)
class DashboardView:
    title: str
    source: str  # where the figures came from, in words ("live", "simulation at t=2400s")
    generated_at: str
    totals: Totals
    nodes: tuple[NodeRow, ...]
    queues: tuple[QueueView, ...]
    pending: tuple[PendingGroup, ...]
    timeline: tuple[tuple[float, float], ...] = ()  # (time_s, GPU allocated %)
    warnings: tuple[str, ...] = ()
    queue_colors: dict[str, str] = field(default_factory=dict)
    usage_note: str = ""  # how recent usage is measured ("" when time-based fair share is off)
