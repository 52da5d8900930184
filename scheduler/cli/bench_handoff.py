"""`tessera bench handoff`: what a burst of fractions under the device plugin's hand-off costs the
scheduler itself, against the same burst of whole GPUs, in one process (see `scheduler/bench/handoff.py`).

tessera bench handoff [--nodes 100] [--pods 500] [--fraction 0.5] [--marks-per-cycle 8] [--output json]
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from scheduler.api.cli import check_choice, fail, output_console
from scheduler.bench.handoff import HandoffConfig, run_handoff
from scheduler.placement.registry import DEFAULT_POLICY, policy_names
from scheduler.state.backend import BACKENDS, BackendError


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("handoff")
    def handoff(
        nodes: Annotated[int, typer.Option(min=1, help="GPU nodes.")] = 100,
        gpus_per_node: Annotated[int, typer.Option(min=1, max=64, help="GPUs per node.")] = 8,
        pods: Annotated[int, typer.Option(min=1, help="Pods in each burst.")] = 500,
        fraction: Annotated[
            float, typer.Option(min=0.01, max=0.99, help="GPU fraction each pod of the fraction burst asks.")
        ] = 0.5,
        marks_per_cycle: Annotated[
            int, typer.Option(min=1, help="Pods the device plugin marks allocated between two cycles.")
        ] = 8,
        policy: Annotated[str, typer.Option(metavar="NAME", help="Placement policy.")] = DEFAULT_POLICY,
        backend: Annotated[
            str | None, typer.Option(metavar="NAME", help=f"Array backend: {', '.join(BACKENDS)}.")
        ] = None,
        output: Annotated[
            str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json.")
        ] = "table",
    ) -> None:
        """Scheduler CPU per pod for a burst of fractions through the hand-off vs one of whole GPUs."""
        check_choice(output, ("table", "json"), "--output")
        check_choice(policy, policy_names(), "--policy")
        if backend is not None:
            check_choice(backend, BACKENDS, "--backend")
        if nodes * gpus_per_node < pods * fraction or nodes * gpus_per_node < pods:
            raise fail(f"{pods} pods of a whole GPU do not fit {nodes} x {gpus_per_node} GPUs", code=2)
        cfg = HandoffConfig(nodes=nodes, gpus_per_node=gpus_per_node, pods=pods, fraction=fraction,
                            marks_per_cycle=marks_per_cycle, policy=policy, backend=backend)  # fmt: skip
        try:
            result = run_handoff(cfg)
        except BackendError as exc:
            raise fail(str(exc), code=1) from None
        if output == "json":
            typer.echo(json.dumps(result, indent=2))
        else:
            _print(result)
        if any(
            r["bound"] < pods or r["most_waiting_on_a_node"] > 1
            for r in (result["fractions"], result["whole_gpus"])
        ):
            raise typer.Exit(code=1)  # a burst that did not finish, or two pods waiting on a node: a bug


def _print(r: dict[str, Any]) -> None:
    console = output_console()
    c = r["config"]
    table = Table(title=f"{c['pods']} pods on {c['nodes']} x {c['gpus_per_node']} GPUs, "
                        f"{c['marks_per_cycle']} marks per cycle")  # fmt: skip
    for col in (
        "burst",
        "bound",
        "cycles",
        "scheduler CPU s",
        "ms per pod",
        "most waiting",
        "GPUs",
        "part used",
    ):
        table.add_column(col, justify="right")
    for name, key in ((f"fractions of {c['fraction']:g}", "fractions"), ("whole GPUs", "whole_gpus")):
        x = r[key]
        table.add_row(name, str(x["bound"]), str(x["cycles"]), f"{x['scheduler_cpu_s']:.3f}",
                      f"{x['cpu_ms_per_pod']:.3f}", str(x["most_waiting_on_a_node"]), str(x["gpus_used"]),
                      str(x["gpus_partly_used"]))  # fmt: skip
    console.print(table)
    console.print(
        f"scheduler CPU per whole-GPU pod / per fraction: [bold]{r['fraction_to_whole_cpu']:.3f}[/]"
    )
