"""`tessera nodes`: every GPU in the cluster, from the node agents' GPUNodeReports."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.table import Table

from scheduler.api import GPUNodeReport, GPUReport
from scheduler.api.cli import FAILURE, USAGE, check_choice, fail, output_console, warning_line, yaml_problem
from scheduler.api.keys import GROUP, VERSION
from scheduler.cli.kube import REQUEST_TIMEOUT_S, ContextOption, KubeconfigOption, connect
from scheduler.ui.fmt import gpus as in_gpus

PLURAL = "gpunodereports"
OUTPUTS = ("table", "wide", "json")


class ReportsUnavailable(RuntimeError):
    """The reports could not be read; the message is one line."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def parse_reports(items: Iterable[Any], warn: list[str]) -> list[GPUNodeReport]:
    """Validate raw report objects; a bad one is named in `warn` and skipped."""
    reports: list[GPUNodeReport] = []
    for i, item in enumerate(items):
        try:
            reports.append(GPUNodeReport.model_validate(item))
        except ValidationError as exc:
            name = item.get("metadata", {}).get("name") if isinstance(item, dict) else None
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"])
            warn.append(f"skipping report {name or f'#{i}'}: {where}: {error['msg']}")
    return sorted(reports, key=lambda r: r.metadata.name)


def _items(data: Any) -> list[Any]:
    """Flatten documents into report objects: lists and `kind: *List` wrappers are unpacked."""
    if isinstance(data, list):
        return [x for d in data for x in _items(d)]
    if isinstance(data, dict) and "spec" not in data and "items" in data:
        return list(data.get("items") or [])
    return [] if data is None else [data]


def load_file(path: Path, warn: list[str]) -> list[GPUNodeReport]:
    """Reports from JSON or YAML: one report, a list, a `kind: List` or several YAML documents."""
    try:
        text = path.read_text()
        docs = list(yaml.safe_load_all(text))
    except OSError as exc:
        raise ReportsUnavailable(f"cannot read {path}: {_first_line(exc)}") from None
    except yaml.YAMLError as exc:
        raise ReportsUnavailable(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
    return parse_reports(_items(docs), warn)


def load_cluster(kubeconfig: str | None, context: str | None, warn: list[str]) -> list[GPUNodeReport]:
    from kubernetes import client

    api = client.CustomObjectsApi(connect(kubeconfig, context))
    try:
        listed: Any = api.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _request_timeout=REQUEST_TIMEOUT_S
        )
    except Exception as exc:
        raise ReportsUnavailable(f"cannot read GPUNodeReports from the cluster: {_first_line(exc)}") from None
    return parse_reports(listed.get("items") or [], warn)


def _pods(gpu: GPUReport) -> list[str]:
    names = {f"{s.namespace}/{s.pod}" for s in gpu.shares}
    names |= {f"{p.namespace}/{p.pod}" for p in gpu.processes if p.pod and p.namespace}
    return sorted(names)


def _memory(gpu: GPUReport) -> str:
    return f"{gpu.memory_used_mib / 1024:.1f}/{gpu.memory_total_mib / 1024:.1f} GiB"


def _opt(value: float | None, unit: str, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _health(gpu: GPUReport) -> str:
    colour = {"Healthy": "green", "Unhealthy": "red"}.get(gpu.health, "yellow")
    reason = f" ({gpu.health_reason})" if gpu.health_reason and gpu.health != "Healthy" else ""
    return f"[{colour}]{gpu.health}[/{colour}]{reason}"


def gpu_table(reports: list[GPUNodeReport], wide: bool) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["NODE", "GPU", "MODEL", "MEMORY", "UTIL", "ASSIGNED", "PODS", "HEALTH"]  # ASSIGNED: GPUs
    if wide:
        columns[3:3] = ["UUID"]
        columns += ["TEMP", "POWER", "PROCS", "POD NAMES", "OBSERVED"]
    for col in columns:
        table.add_column(col, no_wrap=col != "POD NAMES")
    for report in reports:
        for gpu in report.spec.gpus:
            pods = _pods(gpu)
            row = [
                report.metadata.name,
                str(gpu.index),
                gpu.model,
                _memory(gpu),
                _opt(gpu.utilization_pct, "%"),
                in_gpus(gpu.assigned_milli, 3),
                str(len(pods)),
                _health(gpu),
            ]
            if wide:
                row[3:3] = [gpu.uuid]
                row += [
                    _opt(gpu.temperature_c, "C"),
                    _opt(gpu.power_w, "W", 1),
                    str(len(gpu.processes)),
                    ", ".join(pods) or "-",
                    report.spec.observed_at,
                ]
            table.add_row(*row)
    return table


def node_tables(report: GPUNodeReport) -> list[Table]:
    gpus = gpu_table([report], wide=True)
    spec = report.spec
    gpus.title = (
        f"{report.metadata.name}: driver {spec.driver_version or '?'}, CUDA {spec.cuda_version or '?'}"
    )
    gpus.title_justify = "left"
    procs = Table(title="processes", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for col in ("GPU", "PID", "NAMESPACE", "POD", "CONTAINER", "USED"):
        procs.add_column(col, no_wrap=True)
    shares = Table(
        title="assigned shares", title_justify="left", box=None, header_style="bold", pad_edge=False
    )
    for col in ("GPU", "NAMESPACE", "POD", "SHARE", "LIMIT", "USED", "STATE"):
        shares.add_column(col, no_wrap=True)
    for gpu in report.spec.gpus:
        for p in sorted(gpu.processes, key=lambda p: p.pid):
            procs.add_row(
                str(gpu.index),
                str(p.pid),
                p.namespace or "-",
                p.pod or "(not in a pod)",
                p.container or "-",
                f"{p.used_mib} MiB",
            )
        for s in gpu.shares:
            state = "[red]over limit[/red]" if s.over_limit else "within"
            shares.add_row(
                str(gpu.index),
                s.namespace,
                s.pod,
                in_gpus(s.milli, 3),
                f"{s.memory_limit_mib} MiB",
                f"{s.memory_used_mib} MiB",
                state,
            )
    if not procs.rows:
        procs.add_row("-", "-", "-", "(no GPU processes)", "-", "-")
    if not shares.rows:
        shares.add_row("-", "-", "(no assigned pods)", "-", "-", "-", "-")
    return [gpus, procs, shares]


def nodes(
    node: Annotated[str | None, typer.Argument(help="Show one node in detail, with its processes.")] = None,
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="FORMAT", help="table (default), wide or json.")
    ] = "table",
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file", metavar="FILE", help="Read reports from a JSON/YAML file, not the cluster."
        ),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Every GPU as the node agents see it: memory, utilisation, assigned share (GPUs), pods, health."""
    check_choice(output, OUTPUTS, "--output")
    warnings: list[str] = []
    try:
        reports = load_file(from_file, warnings) if from_file else load_cluster(kubeconfig, context, warnings)
    except ReportsUnavailable as exc:  # the user's file is a mistake (2); the cluster's answer is not (1)
        raise fail(str(exc), USAGE if from_file else FAILURE) from None
    for line in warnings:
        warning_line(line)
    if node is not None:
        reports = [r for r in reports if r.metadata.name == node]
        if not reports:
            raise fail(
                f"no GPUNodeReport for node {node!r} (is the tessera node agent running there?)", USAGE
            )
    if output == "json":
        dumped = [r.model_dump(by_alias=True, exclude_none=True, mode="json") for r in reports]
        typer.echo(json.dumps(dumped[0] if node is not None else dumped, indent=2))
        return
    out = output_console()
    if not reports:
        out.print("No GPUNodeReports found (is the tessera node agent running?).")
        return
    if node is not None:
        for table in node_tables(reports[0]):
            out.print(table)
            out.print()
        return
    out.print(gpu_table(reports, wide=output == "wide"))


def register(app: typer.Typer) -> None:
    """Add `tessera nodes` to the main command line."""
    app.command("nodes", short_help="Every GPU, from the node agents' reports.")(nodes)
