"""`tessera doctor` (also `kubectl tessera doctor`): check that Tessera works on a cluster and say what
to fix. Exit status 0 when nothing failed (warnings allowed), 1 otherwise."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from scheduler.api.cli import FAILURE, check_choice, output_console
from scheduler.cli.cluster_reader import KubeReader
from scheduler.cli.doctor_checks import DoctorOptions, Finding, diagnose
from scheduler.cli.kube import ContextOption, KubeconfigOption, connect

MARKS = {"ok": "[green]✓[/]", "warn": "[yellow]![/]", "fail": "[red]✗[/]"}


def render(console: Console, findings: list[Finding]) -> None:
    width = max(len(f.check) for f in findings)
    for f in findings:
        console.print(f"{MARKS[f.status]} {f.check:<{width}}  {escape(f.message)}")
        if f.fix and f.status != "ok":
            console.print(f"  {'':<{width}}  [dim]fix:[/] {escape(f.fix)}")
    failed = sum(f.status == "fail" for f in findings)
    warned = sum(f.status == "warn" for f in findings)
    verdict = "[red]problems found[/]" if failed else "[green]Tessera looks healthy[/]"
    console.print(f"{verdict}: {failed} failed, {warned} warning(s)")


def doctor(
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", metavar="NS", help="Namespace Tessera is installed in.")
    ] = "tessera-system",
    lease_name: Annotated[
        str, typer.Option(metavar="NAME", help="The scheduler's leader Lease.")
    ] = "tessera-scheduler",
    probe_namespace: Annotated[
        str, typer.Option(metavar="NS", help="Namespace of the webhook probe (a dry-run pod create).")
    ] = "default",
    scheduler_name: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="The schedulerName pods give (default: the one the webhooks match on, else tessera).",
        ),
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="text or json.")] = "text",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Check a cluster: CRDs established, scheduler leading, webhook reachable, device plugin and agent
    on every GPU node, queues valid. Prints what to fix; exit status 1 when a check failed."""
    check_choice(output, ("text", "json"), "--output")
    reader = KubeReader(connect(kubeconfig, context))
    opts = DoctorOptions(
        namespace=namespace,
        lease_name=lease_name,
        probe_namespace=probe_namespace,
        scheduler_name=scheduler_name,
    )
    findings = diagnose(reader, opts)
    if output == "json":
        typer.echo(json.dumps([f.to_json() for f in findings], indent=2))
    else:
        render(output_console(highlight=False), findings)
    if any(f.status == "fail" for f in findings):
        raise typer.Exit(FAILURE)


def register(app: typer.Typer) -> None:
    app.command("doctor", short_help="Check Tessera on a cluster; say what to fix.")(doctor)
