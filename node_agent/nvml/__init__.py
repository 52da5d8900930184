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
from node_agent.nvml.health import APPLICATION_XIDS, marks_unhealthy
from node_agent.nvml.spec import GPUSpecError, parse_gpu_spec


def open_backend(fake_spec: str | None = None, *, seed: str = "") -> NVMLBackend:
    """The fake backend when `fake_spec` is given (e.g. "8xH100-80GB"), else real NVML.

    Raises `NVMLUnavailable` (no driver) or `GPUSpecError` (bad spec), both with a one-line message.
    """
    if fake_spec is not None:
        from node_agent.nvml.fake import FakeNVML

        return FakeNVML(fake_spec, seed=seed)
    from node_agent.nvml.real import RealNVML

    return RealNVML()


__all__ = [
    "APPLICATION_XIDS",
    "DeviceInfo",
    "DeviceSample",
    "GPUEvent",
    "GPUSpecError",
    "NVMLBackend",
    "NVMLUnavailable",
    "ProcessInfo",
    "marks_unhealthy",
    "open_backend",
    "parse_gpu_spec",
]
