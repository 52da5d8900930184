"""`FakeNVML`: a scriptable NVML for tests and demos, built from a spec such as `8xH100-80GB`.

Tests drive it (processes, usage, utilisation, Xid/ECC/lost events, per-device NVML failures); its
reads go through the same per-call error mapping as the real backend, so a failure injected here
behaves exactly as the same NVML error would on real hardware.
"""

from __future__ import annotations

import threading
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import pynvml

from node_agent.nvml.calls import guarded
from node_agent.nvml.facade import DeviceInfo, DeviceSample, GPUEvent, ProcessInfo
from node_agent.nvml.health import HealthLedger
from node_agent.nvml.spec import parse_gpu_spec

T = TypeVar("T")
Call = Literal["memory", "utilization", "temperature", "power", "processes"]
CALLS: tuple[Call, ...] = ("memory", "utilization", "temperature", "power", "processes")
# Injectable NVML failures by short name.
ERRORS: dict[str, int] = {
    "not_supported": pynvml.NVML_ERROR_NOT_SUPPORTED,
    "lost": pynvml.NVML_ERROR_GPU_IS_LOST,
    "reset_required": pynvml.NVML_ERROR_RESET_REQUIRED,
    "no_permission": pynvml.NVML_ERROR_NO_PERMISSION,
    "timeout": pynvml.NVML_ERROR_TIMEOUT,
    "unknown": pynvml.NVML_ERROR_UNKNOWN,
}
_UUID_NAMESPACE = uuidlib.UUID("5d1e55e7-7e55-4e7a-9a00-000000000000")


@dataclass
class _GPUState:
    info: DeviceInfo
    processes: dict[int, int] = field(default_factory=dict)  # pid -> used MiB
    memory_used_mib: int | None = None  # None: the sum of the processes' use
    utilization_pct: float = 0.0
    temperature_c: float = 35.0
    power_w: float = 60.0
    failures: dict[str, int] = field(default_factory=dict)  # call -> NVML error code


class FakeNVML:
    """A fake NVML. `seed` (e.g. the node name) makes UUIDs differ between fake nodes, deterministically."""

    def __init__(self, spec: str, *, seed: str = "", driver: str = "550.54.15 (fake)") -> None:
        self._lock = threading.Lock()
        self._health = HealthLedger()
        self._driver = driver
        self._gpus: list[_GPUState] = []
        for model in parse_gpu_spec(spec):
            for _ in range(model.count):
                index = len(self._gpus)
                uid = uuidlib.uuid5(_UUID_NAMESPACE, f"{seed}/{index}/{model.model}/{model.memory_mib}")
                info = DeviceInfo(
                    index=index, uuid=f"GPU-{uid}", name=model.name, memory_total_mib=model.memory_mib
                )
                self._gpus.append(_GPUState(info=info))

    # -- NVMLBackend ---------------------------------------------------------------------------------
    def driver_version(self) -> str | None:
        return self._driver

    def cuda_version(self) -> str | None:
        return "12.4"

    def devices(self) -> list[DeviceInfo]:
        return [gpu.info for gpu in self._gpus]

    def sample(self, index: int) -> DeviceSample:
        sample = DeviceSample(index=index)
        with self._lock:
            gpu = self._gpu(index)
            total = gpu.info.memory_total_mib
            used = gpu.memory_used_mib if gpu.memory_used_mib is not None else sum(gpu.processes.values())
            used = min(used, total)
            procs = [ProcessInfo(pid=pid, used_mib=mib) for pid, mib in sorted(gpu.processes.items())]
            failures = dict(gpu.failures)
            util, temp, power = gpu.utilization_pct, gpu.temperature_c, gpu.power_w

        def read(call: str, value: T) -> T:
            code = failures.get(call)
            if code is not None:
                raise pynvml.NVMLError(code)
            return value

        if guarded(sample, "memory", lambda: read("memory", used)) is not None:
            sample.memory_used_mib, sample.memory_free_mib = used, total - used
        sample.utilization_pct = guarded(sample, "utilization", lambda: read("utilization", util))
        sample.temperature_c = guarded(sample, "temperature", lambda: read("temperature", temp))
        sample.power_w = guarded(sample, "power", lambda: read("power", power))
        sample.processes = guarded(sample, "processes", lambda: read("processes", procs)) or []
        return self._health.apply(sample)

    def poll_events(self, timeout_s: float = 0.0) -> list[GPUEvent]:
        # The fake never blocks: tests inject events before they poll.
        return self._health.drain()

    def close(self) -> None:
        pass

    # -- what tests and demos drive ------------------------------------------------------------------
    def _gpu(self, index: int) -> _GPUState:
        if not 0 <= index < len(self._gpus):
            raise IndexError(f"fake NVML has no GPU {index} (it has {len(self._gpus)})")
        return self._gpus[index]

    def add_process(self, index: int, pid: int, used_mib: int) -> None:
        """Start (or resize) a compute process `pid` using `used_mib` on GPU `index`."""
        with self._lock:
            self._gpu(index).processes[pid] = used_mib

    def set_process_memory(self, pid: int, used_mib: int) -> None:
        with self._lock:
            for gpu in self._gpus:
                if pid in gpu.processes:
                    gpu.processes[pid] = used_mib

    def remove_process(self, pid: int) -> None:
        """The process exited (or was killed): it disappears from every GPU."""
        with self._lock:
            for gpu in self._gpus:
                gpu.processes.pop(pid, None)

    def set_memory_used(self, index: int, used_mib: int | None) -> None:
        """Override the GPU's used memory (None: the sum of its processes)."""
        with self._lock:
            self._gpu(index).memory_used_mib = used_mib

    def set_utilization(self, index: int, pct: float) -> None:
        with self._lock:
            self._gpu(index).utilization_pct = pct

    def set_temperature(self, index: int, celsius: float) -> None:
        with self._lock:
            self._gpu(index).temperature_c = celsius

    def set_power(self, index: int, watts: float) -> None:
        with self._lock:
            self._gpu(index).power_w = watts

    def inject_xid(self, index: int, code: int, message: str = "") -> None:
        self._gpu(index)
        self._health.push(GPUEvent(index, "xid", code=code, message=message))

    def inject_ecc(self, index: int) -> None:
        """A double-bit (uncorrectable) ECC error."""
        self._gpu(index)
        self._health.push(
            GPUEvent(index, "ecc", code=pynvml.nvmlEventTypeDoubleBitEccError, message="double-bit ECC error")
        )

    def lose_gpu(self, index: int) -> None:
        """The GPU falls off the bus: every NVML call on it now fails with GpuIsLost."""
        for call in CALLS:
            self.fail(index, call, "lost")

    def fail(self, index: int, call: Call, error: str = "unknown") -> None:
        """Make one NVML call on one GPU fail with `error` (a key of ERRORS) until `clear_failures`."""
        if call not in CALLS:
            raise ValueError(f"unknown NVML call {call!r}; one of {', '.join(CALLS)}")
        if error not in ERRORS:
            raise ValueError(f"unknown NVML error {error!r}; one of {', '.join(ERRORS)}")
        with self._lock:
            self._gpu(index).failures[call] = ERRORS[error]

    def clear_failures(self, index: int | None = None) -> None:
        with self._lock:
            for gpu in self._gpus if index is None else [self._gpu(index)]:
                gpu.failures.clear()
