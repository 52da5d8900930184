"""The NVML facade interface. Backends: `node_agent.nvml.real` and `node_agent.nvml.fake`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol


class NVMLUnavailable(RuntimeError):
    """NVML cannot be used at all on this machine (no driver, no library). The message is one line."""


@dataclass(frozen=True)
class DeviceInfo:
    """Static facts about one GPU."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int
    mig_enabled: bool = False


@dataclass(frozen=True)
class ProcessInfo:
    """A compute process on a GPU, as NVML reports it (host PID namespace)."""

    pid: int
    used_mib: int


@dataclass
class DeviceSample:
    """One reading of a GPU. Any field NVML could not supply is None and named in `errors`."""

    index: int
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    processes: list[ProcessInfo] = field(default_factory=list)
    healthy: bool = True
    health_reason: str | None = None
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GPUEvent:
    """A health-relevant event (Xid, ECC, GPU lost)."""

    index: int
    kind: Literal["xid", "ecc", "lost"]
    code: int = 0
    message: str = ""


class NVMLBackend(Protocol):
    def driver_version(self) -> str | None: ...

    def devices(self) -> list[DeviceInfo]: ...

    def sample(self, index: int) -> DeviceSample:
        """Read one GPU. Never raises for per-call NVML errors: they land in `DeviceSample.errors`."""
        ...

    def poll_events(self, timeout_s: float = 0.0) -> list[GPUEvent]:
        """Return pending Xid/ECC/lost events (waits up to timeout_s for the first one)."""
        ...

    def close(self) -> None: ...
