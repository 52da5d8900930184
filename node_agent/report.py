"""Build a `GPUNodeReport` from one round of NVML samples, process owners and the node's pods."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from node_agent.cgroup import ContainerRef
from node_agent.nvml import DeviceInfo, DeviceSample
from node_agent.pods import PodInfo
from scheduler.api import AssignedGPU, GPUNodeReport, GPUNodeReportSpec, GPUProcess, GPUReport
from scheduler.api.keys import MILLI_PER_GPU
from scheduler.api.meta import ObjectMeta
from scheduler.api.report import PodShare

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Observation:
    """Everything one collection round saw."""

    devices: Sequence[DeviceInfo]
    samples: Sequence[DeviceSample]
    owners: Mapping[int, ContainerRef | None]  # host PID -> its pod, None when not in a pod
    pods: Mapping[str, PodInfo]  # pods on this node by UID
    driver_version: str | None = None
    cuda_version: str | None = None


def share_limit_mib(gpu: AssignedGPU, total_mib: int) -> int:
    """A pod's memory share on one GPU: the assigned MiB, or its fraction of the GPU's memory."""
    if gpu.memory_mib > 0:
        return gpu.memory_mib
    return total_mib * gpu.milli // MILLI_PER_GPU


def assigned_here(pod: PodInfo, node: str, device: DeviceInfo) -> AssignedGPU | None:
    """The pod's assignment entry for this GPU (matched by UUID when the scheduler wrote one)."""
    if pod.assignment is None or pod.assignment.node != node:
        return None
    for gpu in pod.assignment.gpus:
        if (gpu.uuid and gpu.uuid == device.uuid) or (not gpu.uuid and gpu.index == device.index):
            return gpu
    return None


def _gpu_report(node: str, device: DeviceInfo, sample: DeviceSample, obs: Observation) -> GPUReport:
    processes: list[GPUProcess] = []
    used_by_pod: dict[str, int] = {}
    for proc in sample.processes:
        ref = obs.owners.get(proc.pid)
        pod = obs.pods.get(ref.pod_uid) if ref is not None else None
        processes.append(
            GPUProcess(
                pid=proc.pid,
                used_mib=proc.used_mib,
                pod=pod.name if pod else None,
                namespace=pod.namespace if pod else None,
                container=pod.container_name(ref.container_id) if pod and ref else None,
                pod_uid=ref.pod_uid if ref else None,
            )
        )
        if ref is not None:
            used_by_pod[ref.pod_uid] = used_by_pod.get(ref.pod_uid, 0) + proc.used_mib
    shares: list[PodShare] = []
    for pod in obs.pods.values():
        entry = assigned_here(pod, node, device)
        if entry is None:
            continue
        limit = share_limit_mib(entry, device.memory_total_mib)
        used = used_by_pod.get(pod.uid, 0)
        shares.append(
            PodShare(
                pod=pod.name,
                namespace=pod.namespace,
                milli=entry.milli,
                memory_limit_mib=limit,
                memory_used_mib=used,
                over_limit=used > limit,
            )
        )
    shares.sort(key=lambda s: (s.namespace, s.pod))
    return GPUReport(
        index=device.index,
        uuid=device.uuid,
        model=device.name,
        memory_total_mib=device.memory_total_mib,
        memory_used_mib=sample.memory_used_mib or 0,
        utilization_pct=sample.utilization_pct,
        temperature_c=sample.temperature_c,
        power_w=sample.power_w,
        health="Healthy" if sample.healthy else "Unhealthy",
        health_reason=sample.health_reason,
        processes=processes,
        assigned_milli=sum(s.milli for s in shares),
        shares=shares,
    )


def build_report(node: str, obs: Observation, now: datetime | None = None) -> GPUNodeReport:
    by_index = {s.index: s for s in obs.samples}
    gpus = [
        _gpu_report(node, device, by_index.get(device.index) or DeviceSample(index=device.index), obs)
        for device in obs.devices
    ]
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds").replace("+00:00", "Z")
    return GPUNodeReport(
        metadata=ObjectMeta(name=node),
        spec=GPUNodeReportSpec(
            node=node,
            driver_version=obs.driver_version,
            cuda_version=obs.cuda_version,
            observed_at=stamp,
            gpus=gpus,
        ),
    )


def report_json(report: GPUNodeReport, indent: int | None = None) -> str:
    return report.model_dump_json(by_alias=True, exclude_none=True, indent=indent)
