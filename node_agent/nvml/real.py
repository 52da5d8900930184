"""`RealNVML`: the NVML facade over `pynvml` (nvidia-ml-py).

Every NVML call is guarded per device and per call (see `calls.guarded`): one broken GPU or one
unsupported query never hides the others. Xid and double-bit ECC events arrive through an NVML event set.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from typing import Any

import pynvml

from node_agent.nvml.calls import guarded, nvml_message
from node_agent.nvml.facade import DeviceInfo, DeviceSample, GPUEvent, NVMLUnavailable, ProcessInfo
from node_agent.nvml.health import HealthLedger

log = logging.getLogger(__name__)

MIB = 1024 * 1024
# Events that can make a GPU unhealthy; single-bit ECC errors are corrected by the hardware.
HEALTH_EVENTS = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
FATAL_WAIT_ERRORS: tuple[type[Exception], ...] = (pynvml.NVMLError_GpuIsLost,)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _same_handle(a: Any, b: Any) -> bool:
    """NVML device handles are ctypes pointers: compare their addresses, not the Python wrappers."""
    if a is b:
        return True
    try:
        return bool(ctypes.cast(a, ctypes.c_void_p).value == ctypes.cast(b, ctypes.c_void_p).value)
    except (TypeError, ctypes.ArgumentError):
        return bool(a == b)


class RealNVML:
    """NVML on this machine. Raises `NVMLUnavailable` (one line) when there is no usable driver."""

    def __init__(self, *, events: bool = True) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NVMLUnavailable(
                f"NVML unavailable: {nvml_message(exc)} (is the NVIDIA driver installed and this container "
                "started with the NVIDIA runtime?)"
            ) from None
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            self._shutdown()
            raise NVMLUnavailable(f"NVML unavailable: cannot count GPUs: {nvml_message(exc)}") from None
        self._lock = threading.Lock()
        self._health = HealthLedger()
        self._handles: list[Any] = []
        self._devices: list[DeviceInfo] = []
        self._broken: dict[int, str] = {}
        for index in range(count):
            self._open_device(index)
        self._event_set: Any = None
        if events:
            self._register_events()

    # -- devices -----------------------------------------------------------------------------------
    def _open_device(self, index: int) -> None:
        """Read a GPU's static facts; a GPU NVML cannot open is listed and reported unhealthy."""
        handle: Any = None
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            name = _text(pynvml.nvmlDeviceGetName(handle))
            total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB
        except pynvml.NVMLError as exc:
            reason = f"cannot open GPU {index}: {nvml_message(exc)}"
            log.warning("%s", reason)
            self._broken[index] = reason
            self._handles.append(handle)
            self._devices.append(
                DeviceInfo(index=index, uuid=f"GPU-UNAVAILABLE-{index}", name="unknown", memory_total_mib=0)
            )
            return
        mig = False
        # Not a MIG-capable GPU (NotSupported) or the query failed: treat as not MIG.
        with contextlib.suppress(pynvml.NVMLError):
            mig = pynvml.nvmlDeviceGetMigMode(handle)[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        self._handles.append(handle)
        self._devices.append(
            DeviceInfo(index=index, uuid=uuid, name=name, memory_total_mib=total, mig_enabled=mig)
        )

    def _register_events(self) -> None:
        try:
            self._event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            log.warning("NVML events unavailable, Xid/ECC will not be seen: %s", nvml_message(exc))
            return
        for index, handle in enumerate(self._handles):
            if index in self._broken:
                continue
            try:
                mask = pynvml.nvmlDeviceGetSupportedEventTypes(handle) & HEALTH_EVENTS
                if mask:
                    pynvml.nvmlDeviceRegisterEvents(handle, mask, self._event_set)
            except pynvml.NVMLError_NotSupported:
                continue
            except pynvml.NVMLError as exc:
                log.warning("GPU %d: cannot register for Xid/ECC events: %s", index, nvml_message(exc))

    def driver_version(self) -> str | None:
        try:
            return _text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            return None

    def cuda_version(self) -> str | None:
        try:
            version = int(pynvml.nvmlSystemGetCudaDriverVersion())
        except pynvml.NVMLError:
            return None
        return f"{version // 1000}.{version % 1000 // 10}"

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    # -- samples -----------------------------------------------------------------------------------
    def sample(self, index: int) -> DeviceSample:
        sample = DeviceSample(index=index)
        if index < 0 or index >= len(self._handles):
            sample.healthy = False
            sample.health_reason = f"no GPU with index {index}"
            return sample
        if index in self._broken:
            sample.healthy = False
            sample.health_reason = self._broken[index]
            return self._health.apply(sample)
        handle = self._handles[index]
        memory = guarded(sample, "memory", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
        if memory is not None:
            sample.memory_used_mib = int(memory.used) // MIB
            sample.memory_free_mib = int(memory.free) // MIB
        util = guarded(sample, "utilization", lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))
        if util is not None:
            sample.utilization_pct = float(util.gpu)
        temp = guarded(
            sample,
            "temperature",
            lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        )
        if temp is not None:
            sample.temperature_c = float(temp)
        power = guarded(sample, "power", lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
        if power is not None:
            sample.power_w = float(power) / 1000.0  # NVML reports milliwatts
        procs = guarded(sample, "processes", lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        for proc in procs or []:
            used = getattr(proc, "usedGpuMemory", None)
            # NVML gives no per-process figure in some setups (e.g. without permission): count 0.
            sample.processes.append(ProcessInfo(pid=int(proc.pid), used_mib=int(used) // MIB if used else 0))
        return self._health.apply(sample)

    # -- events ------------------------------------------------------------------------------------
    def _index_of(self, device: Any) -> int | None:
        for index, handle in enumerate(self._handles):
            if handle is not None and _same_handle(handle, device):
                return index
        return None

    def poll_events(self, timeout_s: float = 0.0) -> list[GPUEvent]:
        if self._event_set is not None:
            with self._lock:
                self._read_events(timeout_s)
        return self._health.drain()

    def _read_events(self, timeout_s: float) -> None:
        timeout_ms = max(0, int(timeout_s * 1000))
        while True:
            try:
                data = pynvml.nvmlEventSetWait(self._event_set, timeout_ms)
            except pynvml.NVMLError_Timeout:
                return
            except FATAL_WAIT_ERRORS as exc:
                # NVML does not say which GPU was lost: like NVIDIA's plugin, distrust them all.
                for index in range(len(self._handles)):
                    self._health.push(GPUEvent(index, "lost", message=nvml_message(exc)))
                return
            except pynvml.NVMLError as exc:
                log.warning("NVML event wait failed: %s", nvml_message(exc))
                return
            timeout_ms = 0  # drain whatever else is pending without waiting again
            found = self._index_of(data.device)
            if found is None:
                log.warning("NVML event 0x%x for an unknown device ignored", int(data.eventType))
                continue
            if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                self._health.push(GPUEvent(found, "xid", code=int(data.eventData)))
            elif data.eventType & pynvml.nvmlEventTypeDoubleBitEccError:
                self._health.push(
                    GPUEvent(found, "ecc", code=int(data.eventType), message="double-bit ECC error")
                )

    def close(self) -> None:
        if getattr(self, "_event_set", None) is not None:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        self._shutdown()

    @staticmethod
    def _shutdown() -> None:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
