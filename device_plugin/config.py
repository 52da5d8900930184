"""Settings of one device plugin process (filled from the command line)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scheduler.api.keys import GPU_SLICE_RESOURCE, MILLI_PER_GPU, WHOLE_GPU_RESOURCE

DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
# The kubelet's PodResources API (its `--root-dir`/pod-resources/kubelet.sock).
DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
KUBELET_SOCKET = "kubelet.sock"
API_VERSION = "v1beta1"


@dataclass(frozen=True)
class PluginConfig:
    node_name: str
    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    slice_resource: str = GPU_SLICE_RESOURCE
    # One slice per pod sharing a GPU: the finest accepted fraction is 1/MILLI_PER_GPU, so by default a GPU
    # can be shared by as many pods as the scheduler could ever place on it.
    slices_per_gpu: int = MILLI_PER_GPU
    # None turns the whole-GPU endpoint off (NVIDIA's own plugin serves that resource).
    whole_gpu_resource: str | None = WHOLE_GPU_RESOURCE
    # Host directory of the MPS control daemon's pipes; mounted into fractional containers when set.
    mps_pipe_dir: str | None = None
    # The kubelet's PodResources API: which pod the kubelet admits, and which pod holds a container's
    # devices (PreStartContainer). None: not asked (pods cannot be confirmed, nor marked allocated).
    pod_resources_socket: Path | None = DEFAULT_POD_RESOURCES_SOCKET
    # How long Allocate waits for its watch to show the pod the kubelet admits (the kubelet may see it first).
    pod_wait_s: float = 3.0
    # How often the sockets are checked for a kubelet restart or a deleted plugin socket.
    watch_interval_s: float = 1.0
    # How often every GPU is sampled for health, on top of the NVML event stream.
    health_interval_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.node_name:
            raise ValueError("node name is empty: pass --node-name or set NODE_NAME")
        if self.slices_per_gpu < 1:
            raise ValueError(f"slices per GPU must be at least 1, got {self.slices_per_gpu}")

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET
