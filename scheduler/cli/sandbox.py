"""`tessera sandbox up|down|status|kubectl|env`: a real Kubernetes API on loopback with fake GPU nodes.

tessera sandbox up --nodes 2 --gpus 2xA100-40GB     # returns when ready; last line: the kubeconfig
tessera sandbox kubectl get nodes,gpunodereports    # the control plane's own kubectl, its kubeconfig
eval "$(tessera sandbox env)"                       # or: KUBECONFIG and that kubectl first on PATH
tessera sandbox up --kai-compat                     # KAI Scheduler's CRDs and queues; pods of kai-scheduler
tessera sandbox status
tessera sandbox down
"""

from __future__ import annotations

import json
import os
import shlex
import ssl
import time
import urllib.request
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from scheduler.api.cli import FAILURE, USAGE, check_choice, fail, new_app, output_console
from scheduler.sandbox.processes import alive
from scheduler.sandbox.sandbox import KUBELETS, Sandbox, SandboxError, SandboxState, default_data_dir

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", help="Where the sandbox keeps its state (default ~/.local/state/tessera/sandbox)."
    ),
]


def register(app: typer.Typer) -> None:
    sandbox_app = new_app(
        "A real Kubernetes API on loopback with fake GPU nodes: etcd, kube-apiserver, "
        "kube-controller-manager and kube-scheduler, the chart's manifests, the scheduler, and per node "
        "a real kubelet (on a fake container runtime) or a stand-in, the device plugin and the agent "
        "(docs/sandbox.md).",
        no_args_is_help=True,
    )

    @sandbox_app.command()
    def up(
        nodes: Annotated[int, typer.Option(min=1, max=50, help="Fake GPU nodes.")] = 2,
        gpus: Annotated[
            str, typer.Option(help="GPUs of each node, as tessera-agent --fake-gpus takes them.")
        ] = ("2xA100-40GB"),
        kubelet: Annotated[
            str,
            typer.Option(
                help="real: kubelet v1.34 on a fake CRI runtime, in its own mount namespace (needs root); "
                "standin: the Python stand-in (many nodes, made-up capacity, no root)."
            ),
        ] = "real",
        cpu: Annotated[
            str | None,
            typer.Option(help="CPUs each node offers (real: the host's, or less; standin: 32)."),
        ] = None,
        memory: Annotated[
            str | None,
            typer.Option(help="Memory each node offers (real: the host's, or less; standin: 256Gi)."),
        ] = None,
        max_pods: Annotated[
            int | None,
            typer.Option(
                min=1, max=250, help="Pod slots of each node (the kubelet's maxPods; 110 by default)."
            ),
        ] = None,
        timeout: Annotated[float, typer.Option(help="Seconds to wait for each part to be ready.")] = 180.0,
        kai_compat: Annotated[
            bool,
            typer.Option(
                "--kai-compat",
                help="As a cluster where Tessera replaces KAI Scheduler: KAI's Queue and PodGroup CRDs and "
                "its default queues, the chart's kaiCompat on, pods of schedulerName kai-scheduler "
                "(docs/kai-compat.md).",
            ),
        ] = False,
        data_dir: DataDir = None,
    ) -> None:
        """Start the sandbox; return once it is ready and print the kubeconfig path as the last line."""
        from node_agent.nvml.spec import GPUSpecError, parse_gpu_spec

        try:
            parse_gpu_spec(gpus)
        except GPUSpecError as exc:
            raise typer.BadParameter(str(exc), param_hint="--gpus") from None
        check_choice(kubelet, KUBELETS, "--kubelet")
        began = time.monotonic()
        box = Sandbox(
            data_dir,
            say=lambda line: typer.echo(f"[sandbox {time.monotonic() - began:5.1f}s] {line}", err=True),
        )
        try:
            state = box.up(
                nodes=nodes,
                gpus=gpus,
                kubelet=kubelet,
                cpu=cpu,
                memory=memory,
                max_pods=max_pods,
                timeout_s=timeout,
                kai_compat=kai_compat,
            )
        except SandboxError as exc:
            raise fail(str(exc), FAILURE) from None
        typer.echo(
            f"[sandbox] ready in {time.monotonic() - began:.1f} s: API {state.api_url}, "
            f"dashboard {state.scheduler_url}/ui, nodes {', '.join(n.name for n in state.nodes)}",
            err=True,
        )
        for line in _how_to_use(state, data_dir):
            typer.echo(f"[sandbox] {line}", err=True)
        typer.echo(state.kubeconfig)

    @sandbox_app.command(
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )
    def kubectl(ctx: typer.Context, data_dir: DataDir = None) -> None:
        """Run the control plane's own kubectl with the sandbox's kubeconfig: `tessera sandbox kubectl get
        pods -A` (every argument after `kubectl` is kubectl's, `--help` included)."""
        state = _running_state(data_dir)
        os.execv(state.kubectl, [state.kubectl, f"--kubeconfig={state.kubeconfig}", *ctx.args])

    @sandbox_app.command()
    def env(data_dir: DataDir = None) -> None:
        """Print shell lines that point kubectl at the sandbox: `eval "$(tessera sandbox env)"` sets
        KUBECONFIG and puts the control plane's own kubectl first on PATH."""
        state = _running_state(data_dir)
        folder = str(Path(state.kubectl).parent)
        typer.echo(f"export KUBECONFIG={shlex.quote(state.kubeconfig)}")
        typer.echo(f'export PATH={shlex.quote(folder)}:"$PATH"')

    @sandbox_app.command()
    def down(data_dir: DataDir = None) -> None:
        """Stop every process the sandbox started and remove its data folder."""
        box = Sandbox(data_dir)
        if not box.data_dir.exists():  # nothing to stop: the user's mistake (wrong --data-dir?)
            raise fail(f"no sandbox in {box.data_dir}", USAGE)
        try:
            stopped = box.down()
        except SandboxError as exc:
            raise fail(str(exc), FAILURE) from None
        typer.echo(f"stopped {len(stopped)} process(es); removed {box.data_dir}")

    @sandbox_app.command()
    def restart(
        process: Annotated[
            str, typer.Argument(help="A process as `status` names it: kubelet/gpu-node-1, device-plugin/...")
        ],
        data_dir: DataDir = None,
    ) -> None:
        """Stop one process of the sandbox and start it again as it was started (a kubelet restart...)."""
        box = Sandbox(data_dir)
        try:
            rec = box.restart(process)
        except SandboxError as exc:
            raise fail(str(exc), FAILURE) from None
        typer.echo(f"restarted {rec.name} (pid {rec.pid}); log {rec.log}")

    @sandbox_app.command()
    def status(
        data_dir: DataDir = None,
        output: Annotated[str, typer.Option("--output", "-o", help="table or json.")] = "table",
    ) -> None:
        """Say what runs: every process and the API server (exit 1 when something is down)."""
        check_choice(output, ("table", "json"), "--output")
        box = Sandbox(data_dir)
        records = box.table.records()
        if not records:
            raise fail(f"no sandbox in {box.data_dir or default_data_dir()}", FAILURE)
        procs = [{"name": r.name, "pid": r.pid, "running": alive(r), "log": r.log} for r in records]
        state = box.state()
        api = _api_ready(state) if state else "not recorded (up did not finish)"
        report = {
            "data_dir": str(box.data_dir),
            "api": api,
            "processes": procs,
            "kubeconfig": state.kubeconfig if state else None,
            "kubectl": state.kubectl if state else None,
            "scheduler_name": state.scheduler_name if state else None,
            "kai_compat": state.kai_compat if state else None,
            "dashboard": f"{state.scheduler_url}/ui" if state else None,
        }
        healthy = api == "ready" and all(p["running"] for p in procs)
        if output == "json":
            typer.echo(json.dumps(report, indent=2))
        else:
            console = output_console()
            table = Table("process", "pid", "state", "log", title=f"sandbox in {box.data_dir}")
            for p in procs:
                table.add_row(
                    str(p["name"]),
                    str(p["pid"]),
                    "running" if p["running"] else "[red]stopped[/]",
                    str(p["log"]),
                )
            console.print(table)
            console.print(f"API server: {api}")
            if state:
                console.print(f"dashboard: {state.scheduler_url}/ui")
                console.print(f"kubeconfig: {state.kubeconfig}")
                console.print(f"kubectl: {state.kubectl}")
                console.print(
                    f"pods name schedulerName: {state.scheduler_name}"
                    + (" (KAI compatibility on)" if state.kai_compat else "")
                )
        if not healthy:
            raise typer.Exit(FAILURE)

    app.add_typer(sandbox_app, name="sandbox")


def _running_state(data_dir: Path | None) -> SandboxState:
    box = Sandbox(data_dir)
    state = box.state()
    if state is None:
        raise fail(f"no sandbox in {box.data_dir} (tessera sandbox up first)", USAGE)
    if not state.kubectl:
        raise fail(f"the sandbox in {box.data_dir} does not say which kubectl it runs with", FAILURE)
    return state


def _how_to_use(state: SandboxState, data_dir: Path | None) -> list[str]:
    """What to type next: the kubectl of the control plane's release (the machine's own may be older)."""
    where = f" --data-dir {shlex.quote(str(data_dir))}" if data_dir is not None else ""
    lines = [
        f"kubectl {state.kubernetes_version}: {state.kubectl} (a kubectl more than one minor version "
        "older may not work); either",
        f"  tessera sandbox kubectl{where} get pods -A",
        f'  eval "$(tessera sandbox env{where})"     # KUBECONFIG, and that kubectl first on PATH',
    ]
    if state.kai_compat:
        lines.append(
            "KAI compatibility: pods of schedulerName kai-scheduler are scheduled; KAI's Queue and PodGroup "
            "CRDs and its default-parent-queue/default-queue are installed (docs/kai-compat.md)"
        )
    return lines


def _api_ready(state: SandboxState) -> str:
    """'ready', or why not, from the API server's /readyz (any authenticated user may read it)."""
    import yaml

    try:
        config = yaml.safe_load(Path(state.kubeconfig).read_text())
        user = config["users"][0]["user"]
        context = ssl.create_default_context(cafile=config["clusters"][0]["cluster"]["certificate-authority"])
        context.load_cert_chain(user["client-certificate"], user["client-key"])
        with urllib.request.urlopen(f"{state.api_url}/readyz", timeout=3, context=context) as resp:
            return "ready" if resp.status == 200 else f"HTTP {resp.status}"
    except Exception as exc:
        return f"not answering ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
