"""`tessera bench e2e`: throughput through a real kube-apiserver, Tessera or kube-scheduler (see
`scheduler/bench/e2e/`).

tessera bench e2e --nodes 1000 --gpus-per-node 8 --pods 8000 --scheduler tessera|kube-scheduler|both
                  [--fraction-share F] [--gang-size K] [--affinity] [--rate R] [--kubeconfig FILE] [--output json]

"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from scheduler.api.cli import check_choice, fail, output_console, warning_line
from scheduler.bench.e2e.config import SCHEDULERS, E2EConfig, check
from scheduler.bench.e2e.runner import run_compare, run_e2e
from scheduler.bench.e2e.schedulers import SchedulerDidNotStart
from scheduler.bench.e2e.world import WorldError
from scheduler.placement.registry import policy_names
from scheduler.sandbox.assets import AssetsMissing
from scheduler.sandbox.controlplane import ControlPlaneError


def print_e2e(console: Console, r: dict[str, Any]) -> None:
    c = r["config"]
    console.print(
        f"[bold]tessera bench e2e[/]: {r['scheduler']}, {c['nodes']} nodes x {c['gpus_per_node']} GPUs, "
        f"{r['pods']} pods ({r['bound']} bound of {r['expected']} that fit)"
    )
    console.print(
        f"[bold]{r['pods_per_s']:.0f} pods/s[/] from the first create to the last bind "
        f"(created at {r['create_pods_per_s']:.0f}/s); latency p50 {r['latency_p50_s']:.3f} s, "
        f"p99 {r['latency_p99_s']:.3f} s"
    )
    cpu = r["cpu_s"]
    console.print(
        f"CPU s: scheduler {cpu.get('scheduler')}, API server {cpu.get('apiserver')}, etcd {cpu.get('etcd')}, "
        f"benchmark client {cpu.get('bench')}; {r['pods_per_scheduler_cpu_s']} pods per scheduler CPU-second, "
        f"{r['pods_per_cpu_s']} per CPU-second of scheduler + API server + etcd"
    )
    t = Table(title=f"API requests per pod ({r['api_requests_per_pod']}; the scheduler's "
              f"{r['scheduler_requests_per_pod']}; binding it and handing it to the device plugin "
              f"{r['bind_requests_per_pod']})", title_justify="left")  # fmt: skip
    t.add_column("request")
    t.add_column("per pod", justify="right")
    for k, v in r["api_requests"].items():
        t.add_row(k, f"{v:.3f}")
    console.print(t)


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("e2e")
    def e2e(
        nodes: Annotated[int, typer.Option(min=1, help="Node objects (no kubelets).")] = 100,
        gpus_per_node: Annotated[int, typer.Option(min=1, max=64, help="GPUs per node.")] = 8,
        pods: Annotated[int, typer.Option(min=1, help="Pods created and measured.")] = 500,
        scheduler: Annotated[
            str,
            typer.Option(
                metavar="NAME", help="tessera, kube-scheduler (same Kubernetes release), or both in turn."
            ),
        ] = "tessera",
        fraction_share: Annotated[
            float,
            typer.Option(min=0.0, max=1.0, help="Share of pods asking for --fraction of a GPU (Tessera)."),
        ] = 0.0,
        fraction: Annotated[float, typer.Option(help="The fraction those pods ask for.")] = 0.5,
        gang_size: Annotated[
            int, typer.Option(min=0, help="Pods in gangs of this size, one GPU each (Tessera).")
        ] = 0,
        rate: Annotated[
            float, typer.Option(min=0.0, help="Pods created per second (0: as fast as the client can).")
        ] = 0.0,
        preload: Annotated[
            bool, typer.Option(help="Create every pod before the scheduler starts (measure the drain).")
        ] = False,
        repeat: Annotated[int, typer.Option(min=1, help="With --scheduler both: rounds (best of each).")] = 1,
        kubeconfig: Annotated[
            str | None, typer.Option(metavar="FILE", help="Use this API server instead of starting one.")
        ] = None,
        timeout: Annotated[float, typer.Option(min=1.0, help="Seconds to wait for the pods.")] = 600.0,
        creators: Annotated[int, typer.Option(min=1, max=64, help="Client threads creating pods.")] = 8,
        bind_workers: Annotated[int, typer.Option(min=1, max=256, help="Tessera's binder threads.")] = 8,
        policy: Annotated[str, typer.Option(metavar="NAME", help="Tessera's placement policy.")] = "",
        affinity: Annotated[
            bool,
            typer.Option(
                help="Anti-affinity Deployments, zone spread and node affinity by GPU model (whole GPUs, on "
                "nodes in 3 zones of 2 models); every pod bound is checked with kube-scheduler's own filters."
            ),
        ] = False,
        profile: Annotated[
            str | None, typer.Option(metavar="SVG", help="py-spy flame graph of Tessera (py-spy installed).")
        ] = None,
        output: Annotated[
            str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json.")
        ] = "table",
    ) -> None:
        """Create pods on a real kube-apiserver and measure how fast the scheduler binds them.

        Setup (control plane, nodes, the scheduler's start) is not measured. Compare schedulers by runs on
        the same machine at the same time, and machines by pods per CPU-second."""
        check_choice(output, ("table", "json"), "--output")
        check_choice(scheduler, (*SCHEDULERS, "both"), "--scheduler")
        both = scheduler == "both"
        if policy:
            check_choice(policy, policy_names(), "--policy")
        cfg = E2EConfig(
            nodes=nodes, gpus_per_node=gpus_per_node, pods=pods,
            scheduler="kube-scheduler" if both else scheduler,  # type: ignore[arg-type]
            fraction_share=fraction_share, fraction=fraction, gang_size=gang_size, rate=rate,
            preload=preload, kubeconfig=kubeconfig, timeout_s=timeout, creators=creators,
            bind_workers=bind_workers, policy=policy, profile=profile, affinity=affinity,
        )  # fmt: skip
        problem = check(cfg)
        if problem:
            raise fail(problem)
        if cfg.capacity() < pods:
            warning_line(f"only {cfg.capacity():,} of the {pods:,} pods fit {nodes:,} x {gpus_per_node} GPUs")
        err = output_console(stderr=True)
        try:
            say = lambda msg: err.print(f"[dim]{msg}[/]")  # noqa: E731
            result = run_compare(cfg, repeat, progress=say) if both else run_e2e(cfg, progress=say)
        except (AssetsMissing, ControlPlaneError, WorldError, SchedulerDidNotStart) as exc:
            raise fail(str(exc).splitlines()[0], code=1) from None
        if output == "json":
            typer.echo(json.dumps(result, indent=2))
            return
        console = output_console()
        for run in result.get("runs", [result]):
            print_e2e(console, run)
            if "oracle" in run:
                o = run["oracle"]
                if "error" in o:
                    console.print(f"[yellow]kube-scheduler's filters not checked: {o['error']}[/]")
                else:
                    console.print(f"kube-scheduler's filters allow {o['feasible']} of the {o['checked']} pods "
                                  f"where they were bound" + (f": not {'; '.join(o['infeasible'][:3])}"
                                                              if o["infeasible"] else ""))  # fmt: skip

        if "whole_gpu_run" in result:
            ref = result["whole_gpu_run"]
            console.print(
                f"[bold]fractions at {result['fraction_to_whole']:.0%} of the whole-GPU rate[/] measured in this "
                f"run ({ref['pods_per_s']:.0f} pods/s, {ref['api_requests_per_pod']} API requests per pod); "
                f"packing: {result['packing']}, whole: {ref['packing']}"
            )
        if both:
            console.print(
                f"[bold]Tessera / kube-scheduler: {result['ratio_pods_per_s']} x pods/s[/], "
                f"{result['ratio_pods_per_scheduler_cpu_s']} x pods per scheduler CPU-second "
                f"(best of {repeat})"
            )
