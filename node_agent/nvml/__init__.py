"""A small facade over NVML: the only GPU interface the agent and the device plugin use.

Two backends implement `NVMLBackend`: `RealNVML` over `pynvml` (nvidia-ml-py) and `FakeNVML`, driven by
tests and demos. Construct one with `open_backend()`.
"""

from node_agent.nvml.facade import (
    DeviceInfo,
    DeviceSample,
    GPUEvent,
    NVMLBackend,
    NVMLUnavailable,
    ProcessInfo,
)

__all__ = ["DeviceInfo", "DeviceSample", "GPUEvent", "NVMLBackend", "NVMLUnavailable", "ProcessInfo"]
