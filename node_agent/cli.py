"""`tessera-agent`: the node agent's command line."""

from __future__ import annotations

import logging
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from node_agent.agent import Agent
from node_agent.cgroup import CgroupResolver
from node_agent.enforcer import MODES, Watchdog
from node_agent.events import KubeEvents, LogEvents
from node_agent.http import make_server, parse_listen, serve_in_background
from node_agent.kube import ClusterUnavailable, api_client
from node_agent.metrics import AgentMetrics
from node_agent.nvml import GPUSpecError, NVMLUnavailable, open_backend
from node_agent.pods import KubePods, PodSource, StaticPods, pod_info
from node_agent.publisher import ReportPublisher
from node_agent.report import report_json
from scheduler.api.cli import (
    FAILURE,
    USAGE,
    VersionOption,
    check_choice,
    fail,
    first_line,
    new_app,
    yaml_problem,
)

app = new_app(
    "Tessera node agent: NVML collector, GPUNodeReport publisher, Prometheus metrics, limit watchdog.",
    no_args_is_help=False,
)
log = logging.getLogger("tessera-agent")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def load_pods_file(path: Path) -> StaticPods:
    """Pods from a JSON/YAML file: a PodList, a list of pods or one pod."""
    try:
        data: Any = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read pods file {path}: {first_line(exc)}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"pods file {path} is not valid YAML: {yaml_problem(exc)}") from None
    items = data.get("items", [data]) if isinstance(data, dict) else data
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ValueError(f"pods file {path} holds no pods (expected a PodList, a list of pods or a pod)")
    return StaticPods(pod_info(item) for item in items)


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    node: Annotated[
        str | None,
        typer.Option(
            "--node", "--node-name", envvar="NODE_NAME", help="This node's name (default: host name)."
        ),
    ] = None,
    fake_gpus: Annotated[
        str | None, typer.Option(help="Use fake GPUs, e.g. 8xH100-80GB or 2xA100-40GB,1xT4-16GB.")
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="Print one report as JSON and exit (no cluster).")
    ] = False,
    listen: Annotated[
        str | None, typer.Option(help="Serve /metrics, /report, /healthz on HOST:PORT.")
    ] = None,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between collection rounds.")] = 1.0,
    heartbeat: Annotated[
        float, typer.Option(min=1.0, help="Publish the report at least this often (s).")
    ] = 60.0,
    enforce: Annotated[
        str, typer.Option("--enforce", "--enforcement", help="Limit watchdog: off, report or kill.")
    ] = "report",
    proc_root: Annotated[Path, typer.Option(help="Where host PIDs are (the host's /proc).")] = Path("/proc"),
    pods_file: Annotated[
        Path | None, typer.Option(help="Take this node's pods from a JSON/YAML file instead of the API.")
    ] = None,
    kubeconfig: Annotated[
        str | None, typer.Option(help="Kubeconfig (default: in-cluster, then ~/.kube).")
    ] = None,
    no_cluster: Annotated[
        bool, typer.Option("--no-cluster", help="Run without the Kubernetes API (no publishing).")
    ] = False,
    log_level: Annotated[str, typer.Option(metavar="LEVEL", help="DEBUG, INFO, WARNING or ERROR.")] = "INFO",
    version: VersionOption = False,
) -> None:
    """Collect NVML figures every --interval, publish this node's GPUNodeReport, serve metrics."""
    if ctx.invoked_subcommand is not None:
        return
    check_choice(log_level.upper(), LOG_LEVELS, "--log-level")
    if enforce not in MODES:  # (also narrows the type for Watchdog)
        raise typer.BadParameter(f"{enforce!r} is not one of {', '.join(MODES)}", param_hint="--enforce")
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    node_name = node or socket.gethostname()
    try:
        backend = open_backend(fake_gpus, seed=node_name)
        pods: PodSource = load_pods_file(pods_file) if pods_file else StaticPods()
        host_port = parse_listen(listen) if listen else None
    except (GPUSpecError, ValueError) as exc:
        raise fail(str(exc), USAGE) from None
    except NVMLUnavailable as exc:
        raise fail(f"{exc} (use --fake-gpus SPEC to run without a GPU)", FAILURE) from None
    resolver = CgroupResolver(proc_root)
    if once:
        agent = Agent(node_name, backend, pods=pods, resolver=resolver, watchdog=Watchdog("off"))
        typer.echo(report_json(agent.tick(), indent=2))
        backend.close()
        return

    metrics = AgentMetrics(node_name)
    publisher: ReportPublisher | None = None
    events: KubeEvents | LogEvents = LogEvents()
    if not no_cluster:
        try:
            from kubernetes import client

            api = api_client(kubeconfig)
        except ClusterUnavailable as exc:
            raise fail(f"{exc} (use --no-cluster to run without one)", USAGE) from None
        core = client.CoreV1Api(api)
        publisher = ReportPublisher(client.CustomObjectsApi(api), heartbeat_s=heartbeat)
        events = KubeEvents(core, node_name)
        if pods_file is None:
            pods = KubePods(core, node_name)
    watchdog = Watchdog(enforce, events=events)
    agent = Agent(
        node_name,
        backend,
        pods=pods,
        resolver=resolver,
        watchdog=watchdog,
        publisher=publisher,
        metrics=metrics,
        events=events,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = None
    if host_port is not None:
        try:
            server = serve_in_background(
                make_server(agent, *host_port, stale_after_s=max(10.0, 5 * interval))
            )
        except OSError as exc:
            raise fail(f"cannot listen on {listen}: {exc.strerror or exc}", FAILURE) from None
        log.info("serving /metrics, /report and /healthz on %s", listen)
    log.info("agent on node %s: %d GPU(s), enforcement %s", node_name, len(backend.devices()), enforce)
    try:
        agent.run(interval, stop)
    finally:
        if server is not None:
            server.stop()
        backend.close()


@app.command()
def bench(
    fake_gpus: Annotated[str, typer.Option(help="Fake GPUs to collect from.")] = "8xH100-80GB",
    seconds: Annotated[float, typer.Option(min=1.0, help="How long to run the loop.")] = 20.0,
    interval: Annotated[float, typer.Option(min=0.05, help="Seconds between rounds.")] = 1.0,
    procs_per_gpu: Annotated[int, typer.Option(min=0, help="Fake pod processes per GPU.")] = 4,
) -> None:
    """Run the full agent loop on fake GPUs and print its CPU use and peak RSS as JSON."""
    from node_agent.bench import run_bench

    try:
        result = run_bench(fake_gpus, seconds=seconds, interval=interval, procs_per_gpu=procs_per_gpu)
    except GPUSpecError as exc:
        raise fail(str(exc), USAGE) from None
    typer.echo(result.to_json())


def run() -> None:
    """Console-script entry point."""
    app(prog_name="tessera-agent")


if __name__ == "__main__":
    run()
