"""`tessera bench failover`: a new scheduler's time to a synced cache and to its first bind after the old
one is killed, with the restart invariants checked (see `scheduler/bench/failover.py`).

tessera bench failover --nodes 1000 --gpus-per-node 8 --pods 30000 [--in-memory] [--output json]
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from scheduler.api.cli import check_choice, fail, output_console
from scheduler.bench.e2e.failover import run_failover_api
from scheduler.bench.e2e.schedulers import SchedulerDidNotStart
from scheduler.bench.e2e.world import WorldError
from scheduler.bench.failover import FailoverConfig, run_failover_in_memory
from scheduler.placement.registry import DEFAULT_POLICY, policy_names
from scheduler.sandbox.assets import AssetsMissing
from scheduler.sandbox.controlplane import ControlPlaneError
from scheduler.state.backend import BackendError


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("failover")
    def failover(
        nodes: Annotated[int, typer.Option(min=1, help="GPU nodes.")] = 1000,
        gpus_per_node: Annotated[int, typer.Option(min=1, max=64, help="GPUs per node.")] = 8,
        pods: Annotated[int, typer.Option(min=1, help="Running pods when the scheduler is killed.")] = 30_000,
        in_memory: Annotated[
            bool,
            typer.Option(help="Without an API server: the pods as a relist delivers them, two Schedulers."),
        ] = False,
        policy: Annotated[str, typer.Option(metavar="NAME", help="Placement policy.")] = DEFAULT_POLICY,
        kubeconfig: Annotated[
            str | None, typer.Option(metavar="FILE", help="Use this API server instead of starting one.")
        ] = None,
        timeout: Annotated[float, typer.Option(min=1.0, help="Seconds to wait for each step.")] = 1800.0,
        output: Annotated[
            str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json.")
        ] = "table",
    ) -> None:
        """Kill the scheduler holding --pods running pods; time the new one to a synced cache and its
        first bind, and check that it holds what the old one held (no over-commit, same queue usage)."""
        check_choice(output, ("table", "json"), "--output")
        check_choice(policy, policy_names(), "--policy")
        cfg = FailoverConfig(nodes=nodes, gpus_per_node=gpus_per_node, pods=pods, policy=policy)
        err = output_console(stderr=True)
        try:
            if in_memory:
                result = run_failover_in_memory(cfg)
            else:
                say = lambda msg: err.print(f"[dim]{msg}[/]")  # noqa: E731
                result = run_failover_api(cfg, kubeconfig=kubeconfig, timeout_s=timeout, say=say)
        except (AssetsMissing, ControlPlaneError, WorldError, SchedulerDidNotStart, BackendError) as exc:
            raise fail(str(exc).splitlines()[0], code=1) from None
        except TimeoutError as exc:
            raise fail(str(exc), code=1) from None
        if output == "json":
            typer.echo(json.dumps(result, indent=2))
        else:
            _print(result)
        if not result["invariants_hold"]:
            raise typer.Exit(code=1)


def _print(r: dict[str, Any]) -> None:
    console = output_console()
    c = r["config"]
    console.print(
        f"[bold]tessera bench failover[/] ({r['path']}): {c['nodes']} nodes x {c['gpus_per_node']} GPUs, "
        f"{c['pods']:,} running pods, policy {c['policy']}"
    )
    console.print(
        f"new scheduler: cache synced [bold]{r['synced_s']:.2f} s[/], first bind [bold]{r['first_bind_s']:.2f} s[/]"
        " after its start"
    )
    if r["invariants_hold"]:
        console.print(
            "restart invariants hold: same queue usage and GPU shares as the old scheduler, no over-commit"
        )
    for finding in r["findings"]:
        console.print(f"[red]{finding}[/]")
