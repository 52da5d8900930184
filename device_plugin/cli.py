"""Tessera's kubelet device plugin (fractional and whole GPUs)."""

from __future__ import annotations

import logging
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from device_plugin.cluster import ClusterError, KubePodCluster
from device_plugin.config import DEFAULT_PLUGIN_DIR, DEFAULT_POD_RESOURCES_SOCKET, PluginConfig
from device_plugin.manager import DevicePluginManager
from scheduler.api.cli import FAILURE, USAGE, VersionOption, check_choice, fail, first_line, new_app
from scheduler.api.keys import GPU_SLICE_RESOURCE, MILLI_PER_GPU, WHOLE_GPU_RESOURCE

app = new_app(__doc__, no_args_is_help=False)
log = logging.getLogger("device_plugin")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


def _open_cluster(fake: bool, kube_url: str | None, kubeconfig: str | None) -> KubePodCluster | None:
    # Standalone (--fake-gpus) only talks to an API server when one is named explicitly.
    if fake and not kube_url and not kubeconfig:
        return None
    try:
        return KubePodCluster.connect(kube_url, kubeconfig)
    except ClusterError as exc:
        log.error("%s; Allocate will fail until the plugin is restarted with API access", exc)
        return None


@app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    node_name: Annotated[str | None, typer.Option(envvar="NODE_NAME", help="This node's name.")] = None,
    plugin_dir: Annotated[Path, typer.Option(help="Kubelet device-plugin directory.")] = DEFAULT_PLUGIN_DIR,
    fake_gpus: Annotated[
        str | None, typer.Option(help='Run on fake GPUs, e.g. "2xA100-80GB" (no NVML, no cluster needed).')
    ] = None,
    slice_resource: Annotated[str, typer.Option(help="Resource of fractional pods.")] = GPU_SLICE_RESOURCE,
    slices_per_gpu: Annotated[int, typer.Option(help="Slice devices advertised per GPU.")] = MILLI_PER_GPU,
    whole_gpu_resource: Annotated[
        str, typer.Option(help='Resource for whole GPUs; "" when NVIDIA\'s plugin serves it.')
    ] = WHOLE_GPU_RESOURCE,
    mps_pipe_dir: Annotated[
        str | None, typer.Option(help="Host MPS pipe directory to mount into fractional containers.")
    ] = None,
    kube_url: Annotated[str | None, typer.Option(help="API server URL (plain HTTP, for tests).")] = None,
    kubeconfig: Annotated[str | None, typer.Option(help="Kubeconfig file (default: in-cluster).")] = None,
    pod_resources_socket: Annotated[
        str,
        typer.Option(
            help='The kubelet\'s PodResources socket ("" to not use it: pods are then never confirmed).'
        ),
    ] = str(DEFAULT_POD_RESOURCES_SOCKET),
    pod_wait: Annotated[
        float, typer.Option(help="Seconds Allocate waits for the watch to show the pod the kubelet admits.")
    ] = 3.0,
    watch_interval: Annotated[float, typer.Option(help="Seconds between socket checks.")] = 1.0,
    health_interval: Annotated[float, typer.Option(help="Seconds between GPU health samples.")] = 5.0,
    log_level: Annotated[str, typer.Option(metavar="LEVEL", help="DEBUG, INFO, WARNING or ERROR.")] = "INFO",
    version: VersionOption = False,
) -> None:
    """Serve tessera.dev/gpu-slice (and whole GPUs) to the kubelet until SIGTERM."""
    if ctx.invoked_subcommand is not None:
        return
    check_choice(log_level.upper(), LOG_LEVELS, "--log-level")
    _setup_logging(log_level.upper())
    from node_agent.nvml import open_backend  # NVML only when serving, not for --help or bench

    node = node_name or (socket.gethostname() if fake_gpus else None)
    try:
        config = PluginConfig(
            node_name=node or "",
            plugin_dir=plugin_dir,
            slice_resource=slice_resource,
            slices_per_gpu=slices_per_gpu,
            whole_gpu_resource=whole_gpu_resource or None,
            mps_pipe_dir=mps_pipe_dir,
            pod_resources_socket=Path(pod_resources_socket) if pod_resources_socket else None,
            pod_wait_s=pod_wait,
            watch_interval_s=watch_interval,
            health_interval_s=health_interval,
        )
        backend = open_backend(fake_gpus, seed=config.node_name)
    except ValueError as exc:
        raise fail(first_line(exc), USAGE) from None
    except RuntimeError as exc:  # NVML missing or failing
        raise fail(f"{first_line(exc)} (use --fake-gpus SPEC to run without a GPU)", FAILURE) from None
    manager = DevicePluginManager(config, backend, _open_cluster(fake_gpus is not None, kube_url, kubeconfig))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s", signal.Signals(signum).name)
        manager.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    manager.run()


def main() -> None:
    app(prog_name="tessera-device-plugin")


if __name__ == "__main__":
    main()
