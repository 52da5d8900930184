"""`tessera simulate`: run the real scheduler on a simulated cluster (built-in demo or your manifests)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from scheduler.api.cli import check_choice, check_writable, fail, output_console
from scheduler.api.duration import parse_duration
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.placement.registry import DEFAULT_POLICY, policy_names
from scheduler.queues.usage_history import UsageParams
from scheduler.sim.builtin import BUILTIN_UNTIL_S, builtin_manifests
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import ManifestError, load_files
from scheduler.sim.runner import SimResult, run_simulation
from scheduler.sim.summary import summarize, to_json
from scheduler.sim.usage_report import DAY_S, QueueTimeline
from scheduler.state.backend import BACKENDS, BackendError
from scheduler.ui.fmt import gpus

OUTPUTS = ("table", "json")


def _fmt(res: dict[str, float], key: str = "gpu") -> str:
    v = res.get(key, 0.0)
    return "∞" if v < 0 else f"{v:g}"


def print_summary(console: Console, s: dict[str, Any]) -> None:
    g = s["gpus"]
    console.print(
        f"[bold]Tessera simulation[/] (placement {s['policy']}): {s['sim_time_s']:.0f} s simulated in "
        f"{s['wall_s']:.2f} s wall "
        f"({s['cycles']} cycles, {s['placements']} placements, {s['placements_per_s']} placements/s)"
    )
    if s.get("stopped_early"):
        console.print(
            f"Stopped at {s['sim_time_s']:.0f} s: nothing left to happen (no pod to arrive, finish or be "
            "deleted; the rest run for ever or wait)"
        )
    console.print(
        f"GPUs allocated: [bold]{g['allocated']:g} of {g['capacity']}[/] ({g['allocated_pct']:.1f}%) · "
        f"GPUs idle in fragments of partly used GPUs: {gpus(s['stranded_milli'], 2)}"
    )
    phases = ", ".join(f"{n} {p.lower()}" for p, n in sorted(s["pods_by_phase"].items()))
    console.print(f"Pods: {phases}")
    if s["top_pending_reasons"]:
        t = Table(title="Top pending reasons", title_justify="left")
        t.add_column("pods", justify="right")
        t.add_column("reason")
        for r in s["top_pending_reasons"]:
            t.add_row(str(r["pods"]), escape(r["reason"]))
        console.print(t)
    q = Table(title="Queues (GPUs)", title_justify="left")
    for col in ("queue", "parent", "allocated", "fair share", "quota", "requested"):
        q.add_column(col, justify="left" if col in ("queue", "parent") else "right")
    for row in s["queues"]:
        q.add_row(row["name"], row["parent"] or "-", f"{row['allocated'].get('gpu', 0):.2f}", f"{row['fairShare'].get('gpu', 0):.2f}",
                  _fmt(row["quota"]), _fmt(row["requested"]))  # fmt: skip
    console.print(q)
    print_evictions(console, s["events"])
    print_usage(console, s)
    for w in s["warnings"][:10]:
        console.print(f"[yellow]warning:[/] {escape(w)}")


def print_evictions(console: Console, events: list[dict[str, Any]], last: int = 6) -> None:
    """How many pods each action evicted, and the latest evictions with whom they made room for."""
    evicted = [e for e in events if e["type"] == "Evicted"]
    if not evicted:
        return
    counts: dict[str, int] = {}
    for e in evicted:
        counts[e["action"]] = counts.get(e["action"], 0) + 1
    console.print("Evictions: " + ", ".join(f"{n} by {a}" for a, n in sorted(counts.items())))
    t = Table(title=f"Latest evictions (of {len(evicted)})", title_justify="left")
    # The full message (fair shares, the planned new place of a moved pod) is in -o json and --report.
    for col in ("time", "action", "evicted", "to make room for"):
        t.add_column(col, justify="right" if col == "time" else "left", no_wrap=col != "time")
    for e in evicted[-last:]:
        t.add_row(f"{e['time_s']:g}s", e["action"], escape(e["pod"]), escape(e.get("beneficiary", "")))
    console.print(t)


def print_usage(console: Console, s: dict[str, Any]) -> None:
    """With time-based fair share: GPU-hours per queue and day, and each queue's recent usage now."""
    days = s.get("usage_by_day")
    if not days:
        return
    queues = sorted({q for d in days for q, h in d["gpu_hours"].items() if h > 0})
    t = Table(title="GPU-hours by day (time-based fair share)", title_justify="left")
    t.add_column("day", justify="right")
    for q in queues:
        t.add_column(q, justify="right")
    for i, d in enumerate(days):
        t.add_row(str(i), *(f"{d['gpu_hours'].get(q, 0.0):.1f}" for q in queues))
    console.print(t)
    recent = ", ".join(f"{q} {u:.0%}" for q, u in s.get("recent_usage", {}).items() if q in queues)
    console.print(f"Recent GPU usage (share of the cluster over the window, decayed): {recent}")


def usage_params(
    window: str | None, half_life: str | None, k_value: float, resolution: str | None
) -> UsageParams | None:
    """The time-based fair share options, checked (typer.BadParameter names the option)."""
    if window is None:
        for given, name in ((half_life, "--usage-half-life"), (resolution, "--usage-resolution")):
            if given is not None:
                raise typer.BadParameter("needs --usage-window (time-based fair share is off without it)",
                                         param_hint=name)  # fmt: skip
        return None
    values: dict[str, float | None] = {}
    for raw, name, key in ((window, "--usage-window", "window_s"), (half_life, "--usage-half-life", "half_life_s"),
                           (resolution, "--usage-resolution", "resolution_s")):  # fmt: skip
        try:
            values[key] = parse_duration(raw) if raw is not None else None
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint=name) from None
    try:
        return UsageParams(window_s=values["window_s"] or 0.0, half_life_s=values["half_life_s"],
                           k_value=k_value, resolution_s=values["resolution_s"])  # fmt: skip
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--usage-window") from None


def write_report(
    path: Path, scheduler: Scheduler, result: SimResult, *, policy: str, console: Console
) -> None:
    from scheduler.ui import build_view, render_dashboard

    view = build_view(
        scheduler,
        title="Tessera simulation",
        source=f"simulated cluster, policy {policy}, at t={result.end_s:.0f}s",
        timeline=result.timeline,
    )
    try:
        path.write_text(render_dashboard(view), encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot write the report to {path}: {exc.strerror or exc}", code=1) from None
    console.print(f"report written to [bold]{escape(str(path))}[/]")


def register(app: typer.Typer) -> None:
    @app.command(short_help="Run the real scheduler on a simulated cluster.")
    def simulate(
        files: Annotated[
            list[Path] | None,
            typer.Option(
                "-f",
                "--file",
                metavar="PATH",
                help="Manifests (YAML file or folder): Nodes, Pods, Jobs, Queues, PodGroups.",
            ),
        ] = None,
        until: Annotated[
            str | None, typer.Option(metavar="TIME", help="Stop at this simulated time, e.g. 30m, 2h.")
        ] = None,
        policy: Annotated[
            str, typer.Option(metavar="NAME", help=f"Placement policy: {', '.join(policy_names())}.")
        ] = DEFAULT_POLICY,
        output: Annotated[
            str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json.")
        ] = "table",
        seed: Annotated[int, typer.Option(help="Seed of the built-in workload.")] = 7,
        period: Annotated[
            float, typer.Option(metavar="SECONDS", help="Scheduling period in simulated seconds (> 0).")
        ] = 1.0,
        backend: Annotated[
            str | None, typer.Option(metavar="NAME", help=f"Array backend: {', '.join(BACKENDS)}.")
        ] = None,
        report: Annotated[
            Path | None,
            typer.Option(
                metavar="FILE",
                help="Also write the dashboard (GPU map, queues, pending, allocation over time) "
                "as one self-contained HTML file.",
            ),
        ] = None,
        usage_window: Annotated[
            str | None,
            typer.Option(
                metavar="TIME",
                help="Time-based fair share: the window of queues' recent usage (e.g. 7d); off without it.",
            ),
        ] = None,
        usage_half_life: Annotated[
            str | None, typer.Option(metavar="TIME", help="Half-life of past usage (default: no decay).")
        ] = None,
        usage_k_value: Annotated[
            float, typer.Option(metavar="K", help="Weight of recent usage in fair share (KAI's kValue).")
        ] = 1.0,
        usage_resolution: Annotated[
            str | None, typer.Option(metavar="TIME", help="Bucket length of the usage history (window/168).")
        ] = None,
    ) -> None:
        """Run the scheduler on a simulated cluster: the built-in demo, or the manifests given with -f."""
        # Every option is checked before the (possibly long) run starts.
        check_choice(output, OUTPUTS, "--output")
        check_choice(policy, policy_names(), "--policy")
        if backend is not None:
            check_choice(backend, BACKENDS, "--backend")
        if not period > 0 or period != period:
            raise typer.BadParameter(
                f"must be a number of seconds > 0, not {period:g}", param_hint="--period"
            )
        check_writable(report, "--report")
        usage = usage_params(usage_window, usage_half_life, usage_k_value, usage_resolution)
        try:
            # The built-in demo stops when its last pod has arrived: the busiest moment, worth a summary.
            until_s = parse_duration(until) if until is not None else (None if files else BUILTIN_UNTIL_S)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--until") from None
        try:
            manifests = load_files(files) if files else builtin_manifests(seed)
            if not manifests.objects["Node"]:
                raise ManifestError("no Node objects in the given manifests: the cluster would be empty")
            sim = SimCluster.from_manifests(manifests)
            n_nodes = len(manifests.objects["Node"])
            config = SchedulerConfig(
                policy=policy, backend=backend, expected_nodes=max(n_nodes, 16), usage=usage
            )
            scheduler = Scheduler(sim, config)
        except (ManifestError, ValueError, BackendError) as exc:
            raise fail(str(exc)) from None
        console = output_console(stderr=output == "json")
        with Progress(
            TextColumn("[progress.description]{task.description}"), BarColumn(), TextColumn("{task.fields[now]}"),
            TimeElapsedColumn(), console=console, transient=True,
        ) as bar:  # fmt: skip
            horizon = until_s or max(
                (rec.arrival_s + (rec.duration_s or 0) for rec in sim.pods.values()), default=1.0
            )
            task = bar.add_task("simulating", total=max(horizon, 1.0), now="t=0s")

            timeline = QueueTimeline() if usage is not None else None

            def progress(t: float, _next: float) -> None:
                bar.update(task, completed=min(t, horizon), now=f"t={t:.0f}s")
                if timeline is not None:
                    timeline.sample(t, scheduler)

            result = run_simulation(sim, scheduler, until_s=until_s, period_s=period, progress=progress)
        summary = summarize(sim, scheduler, result)
        if timeline is not None and scheduler.fairshare is not None:
            summary["usage_by_day"] = timeline.gpu_hours(DAY_S, result.end_s)
            shares = scheduler.fairshare.history.shares(sim.epoch_s())
            tree = scheduler.last_session.tree if scheduler.last_session is not None else None
            leaves = sorted(n for n, node in tree.nodes.items() if node.is_leaf) if tree is not None else []
            summary["recent_usage"] = {q: round(shares[q].gpu, 4) for q in leaves if q in shares}
        if report is not None:
            write_report(report, scheduler, result, policy=policy, console=console)
        if output == "json":
            typer.echo(to_json(summary))
        else:
            print_summary(console, summary)
