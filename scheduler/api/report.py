"""The `GPUNodeReport` CRD: what NVML sees on one node, written by the node agent."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from scheduler.api.keys import API_VERSION
from scheduler.api.limits import MAX_GPU_MEMORY_MIB, MAX_GPUS_PER_NODE
from scheduler.api.meta import ObjectMeta

Health = Literal["Healthy", "Unhealthy", "Unknown"]


class GPUProcess(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    pid: int
    used_mib: int = Field(default=0, alias="usedMiB")
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    pod_uid: str | None = Field(default=None, alias="podUID")


class PodShare(BaseModel):
    """A pod's assigned share on one GPU against what it actually uses."""

    model_config = ConfigDict(populate_by_name=True)

    pod: str
    namespace: str
    milli: int
    memory_limit_mib: int = Field(alias="memoryLimitMiB")
    memory_used_mib: int = Field(default=0, alias="memoryUsedMiB")
    over_limit: bool = Field(default=False, alias="overLimit")


class GPUReport(BaseModel):
    model_config = ConfigDict(populate_by_name=True, allow_inf_nan=False)

    # The scheduler reads index and memory: bounded (scheduler/api/limits.py) so a report cannot put a
    # number into the arrays that they cannot hold.
    index: int = Field(ge=0, lt=MAX_GPUS_PER_NODE)
    uuid: str
    model: str
    memory_total_mib: int = Field(ge=0, le=MAX_GPU_MEMORY_MIB, alias="memoryTotalMiB")
    memory_used_mib: int = Field(default=0, ge=0, le=MAX_GPU_MEMORY_MIB, alias="memoryUsedMiB")
    utilization_pct: float | None = Field(default=None, alias="utilizationPct")
    temperature_c: float | None = Field(default=None, alias="temperatureC")
    power_w: float | None = Field(default=None, alias="powerW")
    health: Health = "Healthy"
    health_reason: str | None = Field(default=None, alias="healthReason")
    processes: list[GPUProcess] = Field(default_factory=list)
    assigned_milli: int = Field(default=0, alias="assignedMilli")
    shares: list[PodShare] = Field(default_factory=list)


class GPUNodeReportSpec(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    node: str
    driver_version: str | None = Field(default=None, alias="driverVersion")
    cuda_version: str | None = Field(default=None, alias="cudaVersion")
    observed_at: str = Field(alias="observedAt")
    gpus: list[GPUReport] = Field(default_factory=list, max_length=MAX_GPUS_PER_NODE)

    # Derived on every dump so whoever publishes the report also publishes the totals the CRD's printer
    # columns show; input values for it are ignored (recomputed from `gpus`).
    @computed_field  # type: ignore[prop-decorator]
    @property
    def summary(self) -> GPUNodeSummary:
        return summarize_gpus(self.gpus)


class GPUNodeReport(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    api_version: Literal["scheduling.tessera.dev/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["GPUNodeReport"] = "GPUNodeReport"
    metadata: ObjectMeta
    spec: GPUNodeReportSpec


class GPUNodeSummary(BaseModel):
    """Node-level roll-up of the per-GPU figures.

    Kubernetes printer columns take one JSONPath value each and cannot count or add over a list, so
    `kubectl get gpunodereports` reads these totals instead of `spec.gpus`.
    """

    model_config = ConfigDict(populate_by_name=True)

    gpus: int = Field(ge=0)
    healthy_gpus: int = Field(ge=0, alias="healthyGPUs")
    health: Health
    memory_used_mib: int = Field(ge=0, alias="memoryUsedMiB")
    memory_total_mib: int = Field(ge=0, alias="memoryTotalMiB")
    utilization_pct: float | None = Field(default=None, alias="utilizationPct")
    assigned_milli: int = Field(ge=0, alias="assignedMilli")


def summarize_gpus(gpus: list[GPUReport]) -> GPUNodeSummary:
    """Totals over a node's GPUs; health is Unhealthy if any GPU is, Unknown if none is reported."""
    healths = {g.health for g in gpus}
    health: Health = "Healthy"
    if "Unhealthy" in healths:
        health = "Unhealthy"
    elif not gpus or "Unknown" in healths:
        health = "Unknown"
    utils = [g.utilization_pct for g in gpus if g.utilization_pct is not None]
    return GPUNodeSummary(
        gpus=len(gpus),
        healthy_gpus=sum(1 for g in gpus if g.health == "Healthy"),
        health=health,
        memory_used_mib=sum(g.memory_used_mib for g in gpus),
        memory_total_mib=sum(g.memory_total_mib for g in gpus),
        utilization_pct=round(sum(utils) / len(utils), 1) if utils else None,
        assigned_milli=sum(g.assigned_milli for g in gpus),
    )
