"""RealNVML on this GPU-free machine: the genuine no-driver path, and its error mapping with pynvml's
functions replaced by ones that raise pynvml's own NVMLError subclasses."""

import ctypes
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from node_agent.nvml import NVMLUnavailable
from node_agent.nvml.real import RealNVML
from tests.agent.nvml_driver import driver_present

MIB = 1024 * 1024


@pytest.mark.skipif(driver_present(), reason="this machine has an NVIDIA driver")
def test_no_driver_raises_one_clear_line() -> None:
    with pytest.raises(NVMLUnavailable) as info:
        RealNVML()
    message = str(info.value)
    assert message.startswith("NVML unavailable: ") and "\n" not in message
    assert "NVIDIA driver" in message


def _handle(address: int) -> Any:
    return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlDevice_t)


class FakeLib:
    """Stands in for libnvidia-ml behind pynvml's Python functions; raises real NVMLError subclasses."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.fail: dict[tuple[int, str], int] = {}  # (gpu, function) -> NVML error code
        self.events: list[Any] = []
        self.registered: dict[int, int] = {}

    def index(self, handle: Any) -> int:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0) - 0x1000

    def call(self, fn: str, handle: Any, value: Any) -> Any:
        code = self.fail.get((self.index(handle), fn))
        if code is not None:
            raise pynvml.NVMLError(code)
        return value

    def install(self, mp: pytest.MonkeyPatch) -> None:
        mp.setattr(pynvml, "nvmlInit", lambda: None)
        mp.setattr(pynvml, "nvmlShutdown", lambda: None)
        mp.setattr(pynvml, "nvmlDeviceGetCount", lambda: self.count)
        mp.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "550.54.15")
        mp.setattr(pynvml, "nvmlSystemGetCudaDriverVersion", lambda: 12040)
        mp.setattr(pynvml, "nvmlDeviceGetHandleByIndex", self._handle_by_index)
        mp.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: self.call("uuid", h, f"GPU-{self.index(h):04d}"))
        mp.setattr(pynvml, "nvmlDeviceGetName", lambda h: self.call("name", h, b"NVIDIA H100 80GB HBM3"))
        mp.setattr(pynvml, "nvmlDeviceGetMigMode", lambda h: self.call("mig", h, [0, 0]))
        mp.setattr(
            pynvml,
            "nvmlDeviceGetMemoryInfo",
            lambda h: self.call(
                "memory", h, SimpleNamespace(total=81559 * MIB, used=1024 * MIB, free=80535 * MIB)
            ),
        )
        mp.setattr(
            pynvml, "nvmlDeviceGetUtilizationRates", lambda h: self.call("util", h, SimpleNamespace(gpu=42))
        )
        mp.setattr(pynvml, "nvmlDeviceGetTemperature", lambda h, s: self.call("temp", h, 51))
        mp.setattr(pynvml, "nvmlDeviceGetPowerUsage", lambda h: self.call("power", h, 312_500))
        mp.setattr(
            pynvml,
            "nvmlDeviceGetComputeRunningProcesses",
            lambda h: self.call(
                "procs",
                h,
                [
                    SimpleNamespace(pid=100, usedGpuMemory=512 * MIB),
                    SimpleNamespace(pid=101, usedGpuMemory=None),
                ],
            ),
        )
        mp.setattr(pynvml, "nvmlEventSetCreate", lambda: "event-set")
        mp.setattr(pynvml, "nvmlEventSetFree", lambda s: None)
        mp.setattr(
            pynvml,
            "nvmlDeviceGetSupportedEventTypes",
            lambda h: self.call("events", h, pynvml.nvmlEventTypeAll),
        )
        mp.setattr(pynvml, "nvmlDeviceRegisterEvents", self._register)
        mp.setattr(pynvml, "nvmlEventSetWait", self._wait)

    def _handle_by_index(self, index: int) -> Any:
        code = self.fail.get((index, "handle"))
        if code is not None:
            raise pynvml.NVMLError(code)
        return _handle(0x1000 + index)

    def _register(self, handle: Any, mask: int, event_set: Any) -> None:
        self.registered[self.index(handle)] = mask

    def _wait(self, event_set: Any, timeout_ms: int) -> Any:
        if not self.events:
            raise pynvml.NVMLError_Timeout()
        item = self.events.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def event(self, index: int, kind: int, data: int = 0) -> None:
        # A fresh ctypes wrapper around the same address, as NVML hands back in real event data.
        self.events.append(SimpleNamespace(device=_handle(0x1000 + index), eventType=kind, eventData=data))


@pytest.fixture
def lib(monkeypatch: pytest.MonkeyPatch) -> FakeLib:
    fake = FakeLib(3)
    fake.install(monkeypatch)
    return fake


def test_reads_every_field(lib: FakeLib) -> None:
    nvml = RealNVML()
    assert nvml.driver_version() == "550.54.15" and nvml.cuda_version() == "12.4"
    d0 = nvml.devices()[0]
    assert (d0.uuid, d0.name, d0.memory_total_mib, d0.mig_enabled) == (
        "GPU-0000",
        "NVIDIA H100 80GB HBM3",
        81559,
        False,
    )
    s = nvml.sample(0)
    assert (s.memory_used_mib, s.memory_free_mib, s.utilization_pct, s.temperature_c, s.power_w) == (
        1024,
        80535,
        42.0,
        51.0,
        312.5,
    )
    assert [(p.pid, p.used_mib) for p in s.processes] == [(100, 512), (101, 0)]
    assert s.healthy and s.errors == {}
    # Only the health-relevant event types are registered.
    assert lib.registered[0] == pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError


def test_error_mapping_per_device_and_call(lib: FakeLib) -> None:
    lib.fail[(0, "power")] = pynvml.NVML_ERROR_NOT_SUPPORTED
    lib.fail[(0, "util")] = pynvml.NVML_ERROR_NO_PERMISSION
    lib.fail[(1, "temp")] = pynvml.NVML_ERROR_GPU_IS_LOST
    lib.fail[(1, "procs")] = pynvml.NVML_ERROR_GPU_IS_LOST
    nvml = RealNVML()
    s0, s1, s2 = (nvml.sample(i) for i in range(3))
    assert s0.power_w is None and s0.utilization_pct is None and s0.healthy
    assert s0.errors == {"utilization": "Insufficient Permissions"}
    assert s0.temperature_c == 51.0
    assert not s1.healthy and s1.health_reason == "GPU is lost" and s1.temperature_c is None
    assert s1.errors == {"temperature": "GPU is lost", "processes": "GPU is lost"}
    assert s1.power_w == 312.5 and s1.memory_used_mib == 1024  # the calls that still work are still read
    assert s2.healthy and s2.errors == {}
    events = nvml.poll_events()
    assert [(e.index, e.kind) for e in events] == [(1, "lost")]


def test_device_that_cannot_be_opened_is_unhealthy_others_go_on(lib: FakeLib) -> None:
    lib.fail[(1, "handle")] = pynvml.NVML_ERROR_UNKNOWN
    lib.fail[(2, "events")] = pynvml.NVML_ERROR_NOT_SUPPORTED
    nvml = RealNVML()
    assert [d.uuid for d in nvml.devices()] == ["GPU-0000", "GPU-UNAVAILABLE-1", "GPU-0002"]
    bad = nvml.sample(1)
    assert not bad.healthy and "cannot open GPU 1: Unknown Error" in (bad.health_reason or "")
    assert nvml.sample(0).healthy and nvml.sample(2).healthy
    assert set(lib.registered) == {0}


def test_xid_and_ecc_events_map_to_devices(lib: FakeLib) -> None:
    nvml = RealNVML()
    lib.event(2, pynvml.nvmlEventTypeXidCriticalError, 79)
    lib.event(0, pynvml.nvmlEventTypeXidCriticalError, 13)
    lib.event(1, pynvml.nvmlEventTypeDoubleBitEccError)
    events = nvml.poll_events(timeout_s=0.1)
    assert [(e.index, e.kind, e.code) for e in events] == [(2, "xid", 79), (0, "xid", 13), (1, "ecc", 2)]
    assert nvml.sample(0).healthy  # Xid 13 is the application's fault
    assert nvml.sample(2).health_reason == "Xid 79" and not nvml.sample(1).healthy
    assert nvml.poll_events() == []


def test_lost_while_waiting_distrusts_every_gpu(lib: FakeLib) -> None:
    nvml = RealNVML()
    lib.events.append(pynvml.NVMLError_GpuIsLost())
    assert sorted(e.index for e in nvml.poll_events() if e.kind == "lost") == [0, 1, 2]
    assert not any(nvml.sample(i).healthy for i in range(3))


def test_init_failure_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_loaded() -> None:
        raise pynvml.NVMLError_DriverNotLoaded()

    monkeypatch.setattr(pynvml, "nvmlInit", not_loaded)
    with pytest.raises(NVMLUnavailable, match="NVML unavailable: Driver Not Loaded"):
        RealNVML()
