"""The extended resources the plugin serves: GPU slices (fractional pods) and whole GPUs.

Each is its own kubelet endpoint and registration. A slice device is `<uuid>::<k>`: the kubelet counts
slices, while the GPU a fractional pod really gets (and its limits) come from the scheduler's assignment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from device_plugin.inventory import GPUState
from device_plugin.v1beta1 import api_pb2

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
SLICE_SEPARATOR = "::"

ResourceKind = Literal["slice", "whole"]


def socket_name(resource_name: str) -> str:
    """`tessera.dev/gpu-slice` -> `tessera-gpu-slice.sock` (a file name the kubelet joins to its dir)."""
    vendor, _, name = resource_name.partition("/")
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{vendor.split('.')[0]}-{name}" if name else vendor)
    return f"{stem}.sock"


@dataclass(frozen=True)
class Resource:
    name: str
    kind: ResourceKind
    slices_per_gpu: int = 1

    @property
    def endpoint(self) -> str:
        return socket_name(self.name)

    def device_ids(self, gpu: GPUState) -> list[str]:
        if self.kind == "whole":
            return [gpu.uuid]
        return [f"{gpu.uuid}{SLICE_SEPARATOR}{k}" for k in range(self.slices_per_gpu)]

    def devices(self, gpus: list[GPUState]) -> list[api_pb2.Device]:
        out: list[api_pb2.Device] = []
        for gpu in gpus:
            if gpu.info.mig_enabled:
                # MIG instances are NVIDIA's plugin's business; a MIG parent cannot be shared by slices.
                continue
            health = HEALTHY if gpu.healthy else UNHEALTHY
            out.extend(api_pb2.Device(ID=i, health=health) for i in self.device_ids(gpu))
        return out

    def gpu_uuid(self, device_id: str) -> str:
        """The GPU a device ID belongs to."""
        if self.kind == "whole":
            return device_id
        return device_id.rpartition(SLICE_SEPARATOR)[0] or device_id
