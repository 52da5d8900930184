"""A resource vector (gpu in GPUs, cpu in millicores, memory in MiB), the unit of queue accounting."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.model.types import Placement, PodInfo

RESOURCE_NAMES = ("gpu", "cpu", "memory")


@dataclass(frozen=True)
class Resources:
    gpu: float = 0.0
    cpu: float = 0.0
    memory: float = 0.0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.gpu + other.gpu, self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.gpu - other.gpu, self.cpu - other.cpu, self.memory - other.memory)

    def get(self, name: str) -> float:
        return float(getattr(self, name))

    def as_dict(self) -> dict[str, float]:
        return {"gpu": round(self.gpu, 3), "cpu": round(self.cpu, 3), "memory": round(self.memory, 3)}

    @classmethod
    def of(cls, values: dict[str, float]) -> Resources:
        return cls(**{k: float(values.get(k, 0.0)) for k in RESOURCE_NAMES})


def pod_request(pod: PodInfo) -> Resources:
    """What the pod asks for (memory requests count as the share of a GPU decided at placement: until then
    we charge a minimum of 1 milli per device so the queue sees demand)."""
    req = pod.request
    gpu = req.num_devices * max(req.milli, 1) / MILLI_PER_GPU if req.kind != "none" else 0.0
    return Resources(gpu=gpu, cpu=pod.cpu_milli, memory=pod.memory_mib)


def placement_usage(pl: Placement) -> Resources:
    gpu = sum(s.milli for s in pl.gpus) / MILLI_PER_GPU
    return Resources(gpu=gpu, cpu=pl.cpu_milli, memory=pl.memory_mib)
