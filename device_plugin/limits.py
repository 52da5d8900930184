"""What a container is told about the GPUs it got: visible devices, memory and compute limits.

The same limits are written for the two kinds of runtime enforcement in use: NVIDIA MPS
(`CUDA_MPS_*`, honoured when the MPS control daemon serves the GPU) and HAMi-core style interposers
(`CUDA_DEVICE_MEMORY_LIMIT*`, `CUDA_DEVICE_SM_LIMIT`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from device_plugin.inventory import GPUState
from device_plugin.v1beta1 import api_pb2
from scheduler.api.assignment import AssignedGPU
from scheduler.api.keys import MILLI_PER_GPU


@dataclass(frozen=True)
class GrantedGPU:
    """One assigned GPU resolved against this node's inventory."""

    assigned: AssignedGPU
    gpu: GPUState

    @classmethod
    def whole(cls, gpu: GPUState) -> GrantedGPU:
        """The whole of `gpu` (a pod the scheduler did not place: no assignment names it)."""
        return cls(AssignedGPU(index=gpu.index, uuid=gpu.uuid, milli=MILLI_PER_GPU), gpu)

    @property
    def uuid(self) -> str:
        return self.gpu.uuid

    @property
    def memory_limit_mib(self) -> int:
        # A fraction request carries no MiB: its memory share is the same fraction of this GPU.
        if self.assigned.memory_mib > 0:
            return self.assigned.memory_mib
        return self.assigned.milli * self.gpu.info.memory_total_mib // MILLI_PER_GPU

    @property
    def compute_percent(self) -> int:
        return max(1, math.ceil(self.assigned.milli * 100 / MILLI_PER_GPU))


def container_response(
    granted: list[GrantedGPU], *, fractional: bool, mps_pipe_dir: str | None = None
) -> api_pb2.ContainerAllocateResponse:
    resp = api_pb2.ContainerAllocateResponse()
    resp.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in granted)
    if not fractional:
        return resp
    # Inside the container the granted GPUs are renumbered 0..n-1 in NVIDIA_VISIBLE_DEVICES order.
    percent = max(g.compute_percent for g in granted)
    mib = [g.memory_limit_mib for g in granted]
    resp.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(percent)
    resp.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(f"{i}={m}M" for i, m in enumerate(mib))
    resp.envs["CUDA_DEVICE_MEMORY_LIMIT"] = f"{min(mib)}m"
    for i, m in enumerate(mib):
        resp.envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{m}m"
    resp.envs["CUDA_DEVICE_SM_LIMIT"] = str(percent)
    if mps_pipe_dir:
        resp.envs["CUDA_MPS_PIPE_DIRECTORY"] = mps_pipe_dir
        resp.mounts.append(
            api_pb2.Mount(container_path=mps_pipe_dir, host_path=mps_pipe_dir, read_only=False)
        )
    return resp
