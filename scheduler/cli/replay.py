"""`tessera replay`: the FGD paper's trace-replay protocol on openb-format CSVs.

tessera replay --nodes NODES.csv --pods PODS.csv --policy fgd --seeds 42-51 [--tune 1.3]
               [--output json] [--plot out.png] [--reference CURVES.csv] [--bound]
tessera replay --all-variants DIR [--out PREFIX] [--jobs 2] [--bound] [--reference EXPECTED.csv]
tessera replay --list-policies
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from scheduler.api.cli import check_writable, fail, output_console
from scheduler.placement.registry import policy_names
from scheduler.replay.protocol import DEFAULT_TUNE, arrival_order, capacity_milli
from scheduler.replay.runner import PolicyResult, run_policy
from scheduler.replay.trace import Loaded, RowError, TraceError, TraceNode, TracePod, load_nodes, load_pods
from scheduler.state.backend import BACKENDS, BackendError, get_namespace

# The openb trace (Alibaba's GPU-sharing trace, alibaba/clusterdata cluster-trace-gpu-v2023/csv): the
# folder holding its two default lists is TESSERA_TRACE_DIR, else ../shared/traces/openb from where the
# command runs (this project's development layout). --nodes and --pods name the files themselves.
TRACE_DIR_ENV = "TESSERA_TRACE_DIR"
DEFAULT_TRACE_DIR = Path("../shared/traces/openb")
NODE_LIST, POD_LIST = "openb_node_list_gpu_node.csv", "openb_pod_list_default.csv"
DEFAULT_NODES = DEFAULT_TRACE_DIR / NODE_LIST
DEFAULT_PODS = DEFAULT_TRACE_DIR / POD_LIST
VARIANT_POLICIES = ["random", "bestfit", "fgd", "fragfit", "wastefit"]
MAX_ROW_ERRORS_SHOWN = 20
_SEED_PART = re.compile(r"(\d+)(?:\s*-\s*(\d+))?")


def parse_seeds(text: str) -> list[int]:
    """ "42-51", "42,45,50", "42-44,50" -> seeds in the given order, duplicates dropped."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = _SEED_PART.fullmatch(part)
        if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise typer.BadParameter(f"{part!r} is not a seed or a range like 42-51")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        seeds.extend(range(lo, hi + 1))
    if not seeds:
        raise typer.BadParameter("no seed given")
    return list(dict.fromkeys(seeds))


def _fail(message: str, code: int = 2) -> typer.Exit:
    return fail(message, code)


def _report_rows(err: Console, loaded: Loaded[TraceNode] | Loaded[TracePod]) -> None:
    errors: list[RowError] = loaded.errors
    for e in errors[:MAX_ROW_ERRORS_SHOWN]:
        err.print(f"[yellow]skipped:[/yellow] {e}", highlight=False, soft_wrap=True)
    if len(errors) > MAX_ROW_ERRORS_SHOWN:
        err.print(
            f"[yellow]skipped:[/yellow] ... and {len(errors) - MAX_ROW_ERRORS_SHOWN} more rows",
            highlight=False,
        )
    for w in loaded.warnings:
        err.print(f"[yellow]warning:[/yellow] {w}", highlight=False, soft_wrap=True)


def trace_dir() -> Path:
    return Path(os.environ.get(TRACE_DIR_ENV) or DEFAULT_TRACE_DIR)


def _resolve(given: Path | None, file_name: str, flag: str) -> Path:
    if given is not None:
        return given
    default = trace_dir() / file_name
    if default.is_file():
        return default
    where = f"{TRACE_DIR_ENV}={os.environ[TRACE_DIR_ENV]}" if os.environ.get(TRACE_DIR_ENV) else (
        f"{DEFAULT_TRACE_DIR} from {Path.cwd()}"
    )  # fmt: skip
    raise _fail(
        f"no openb trace: {file_name} is not in {where}; the trace is Alibaba's (alibaba/clusterdata, "
        f"cluster-trace-gpu-v2023/csv): set {TRACE_DIR_ENV} to its folder, or pass {flag} (and the other list)"
    )


def _bounds(
    nodes: list[TraceNode],
    pods: list[TracePod],
    seeds: list[int],
    tune: float,
    run: PolicyResult | None = None,
) -> dict[str, Any]:
    """The certified LP bound of every seed (`scheduler/replay/bound.py`). With `run`: the bound for
    placements that place at least as many pods of each fraction size as that run did by 100%."""
    from scheduler.replay.bound import BoundUnavailable, arrived_at, lp_bound
    from scheduler.replay.variants import Cell

    cap = capacity_milli(nodes)
    floors = [None] * len(seeds) if run is None else [r.placed_fractions for r in run.seeds]
    per_seed = []
    try:
        for s, floor in zip(seeds, floors, strict=True):
            arrived = arrived_at(arrival_order(pods, s, tune, cap), cap)
            per_seed.append(lp_bound(nodes, arrived, cap, floor))
    except BoundUnavailable as exc:
        raise _fail(str(exc)) from None
    cell = Cell([b.unallocated_pct for b in per_seed])
    return {
        "mean": round(cell.mean, 4),
        "sd": round(cell.sd, 4),
        "per_seed": [{"seed": s, **b.to_json()} for s, b in zip(seeds, per_seed, strict=True)],
    }


def _table(
    results: list[PolicyResult],
    bound: dict[str, Any] | None = None,
    floors: dict[str, dict[str, Any]] | None = None,
) -> Table:
    moves = any(r.consolidated for r in results)
    t = Table(title="unallocated GPU % at arrived = 100% (mean over seeds)" + (", pods may move" * moves))
    cols = ["policy", "seeds", "unallocated %", "sd", "failed pods", "pods/s"]
    cols += ["moves", "moves/placed pod"] if moves else []
    cols += ["LP, its fractions"] if floors else []
    for col in cols:
        t.add_column(col, justify="right" if col != "policy" else "left")
    for r in results:
        rate = r.attempted / r.elapsed_s if r.elapsed_s > 0 else 0.0
        cells = [
            r.policy, str(len(r.seeds)), f"{r.mean_unallocated:.2f}", f"{r.sd_unallocated:.2f}",
            str(r.failed), f"{rate:,.0f}",
        ]  # fmt: skip
        cells += [str(r.moves), f"{r.moves_per_placed:.4f}"] if moves else []
        cells += [f"{floors[r.policy]['mean']:.2f}"] if floors else []
        t.add_row(*cells)
    if bound is not None:
        rest = ["-"] * (len(cols) - 4)
        t.add_row(
            "LP bound", str(len(bound["per_seed"])), f"{bound['mean']:.2f}", f"{bound['sd']:.2f}", *rest
        )
    return t


def _advance(
    progress: Progress,
    task: TaskID,
    name: str,
    seeds: list[int],
    per_seed: dict[int, int],
    seed: int,
    done: int,
    _total: int,
) -> None:
    base = sum(per_seed[s] for s in seeds[: seeds.index(seed)])
    progress.update(task, completed=base + done, description=f"{name} seed {seed}")


def _write_report(
    path: Path, results: list[PolicyResult], reference: Path | None, seeds: list[int], tune: float
) -> None:
    from scheduler.ui.replay_curves import load_reference_curves
    from scheduler.ui.replay_report import render_replay_report

    ref: list[Any] = []
    if reference is not None:
        ref, _problems = load_reference_curves(reference)
    seed_text = f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    html = render_replay_report(
        [r.to_json() for r in results],
        title="Tessera trace replay",
        subtitle=f"mean of {seed_text}, tune {tune}" + (", published curves dashed" if ref else ""),
        reference=ref,
    )
    try:
        path.write_text(html)
    except OSError as exc:
        raise _fail(f"cannot write report {path}: {exc.strerror}") from None


def register(app: typer.Typer) -> None:
    @app.command("replay", short_help="Replay an openb trace under the FGD protocol.")
    def replay(
        nodes: Annotated[
            Path | None,
            typer.Option(
                help=f"openb node list CSV (default: {NODE_LIST} in ${TRACE_DIR_ENV}, else in {DEFAULT_TRACE_DIR})"
            ),
        ] = None,
        pods: Annotated[
            Path | None,
            typer.Option(
                help=f"openb pod list CSV (default: {POD_LIST} in ${TRACE_DIR_ENV}, else in {DEFAULT_TRACE_DIR})"
            ),
        ] = None,
        policy: Annotated[
            list[str] | None, typer.Option("--policy", "-p", help="placement policy (repeatable)")
        ] = None,
        seeds: Annotated[str, typer.Option(help="seeds: 42-51, 42,43 or 42-44,50")] = "42-51",
        tune: Annotated[
            float, typer.Option(help="inflate the workload to this x GPU capacity")
        ] = DEFAULT_TUNE,
        output: Annotated[str, typer.Option("--output", "-o", help="table or json")] = "table",
        plot: Annotated[Path | None, typer.Option(help="write unallocated-vs-arrived plot (PNG)")] = None,
        reference: Annotated[
            Path | None, typer.Option(help="overlay published curves (CSV) on --plot")
        ] = None,
        backend: Annotated[str | None, typer.Option(help=f"array backend: {'|'.join(BACKENDS)}")] = None,
        report: Annotated[
            Path | None, typer.Option(help="write a self-contained HTML report (curves, table, --reference)")
        ] = None,
        list_policies: Annotated[
            bool, typer.Option("--list-policies", help="print policy names and exit")
        ] = False,
        bound: Annotated[
            bool, typer.Option("--bound", help="certified LP lower bound on unallocated % per seed (HiGHS)")
        ] = False,
        all_variants: Annotated[
            Path | None,
            typer.Option(
                help="replay every openb_pod_list_*.csv of this folder (cluster-trace-gpu-v2023/csv)"
            ),
        ] = None,
        out: Annotated[Path, typer.Option(help="--all-variants: write OUT.json, OUT.md, OUT.png")] = Path(
            "variants"
        ),
        jobs: Annotated[int, typer.Option(help="--all-variants: worker processes")] = 1,
        consolidate: Annotated[
            bool,
            typer.Option(
                "--consolidate",
                help="a pod that fits nowhere may be placed by moving placed pods (consolidation's rules); "
                "every move counted. Not the published protocol",
            ),
        ] = False,
    ) -> None:
        """Replay an openb trace under the FGD paper's protocol and report unallocated GPU %."""
        if list_policies:
            for name in policy_names():
                typer.echo(name)
            return
        if all_variants is not None:
            if consolidate:
                raise _fail("--consolidate replays one pod list; not with --all-variants")
            from scheduler.cli.replay_variants import run_all_variants

            run_all_variants(
                all_variants, policy or VARIANT_POLICIES, parse_seeds(seeds), tune, backend, bound, out,
                jobs, reference, nodes,
            )  # fmt: skip
            return
        if output not in ("table", "json"):
            raise _fail(f"--output must be table or json, not {output!r}")
        if not 0 < tune <= 10:
            raise _fail(f"--tune must be in (0, 10], not {tune}")
        policies = policy or ["fgd"]
        unknown = [p for p in policies if p not in policy_names()]
        if unknown:
            raise _fail(f"unknown policy {', '.join(unknown)}; choose from {', '.join(policy_names())}")
        seed_list = parse_seeds(seeds)
        check_writable(plot, "--plot")  # before the run, not after it
        check_writable(report, "--report")
        if plot is not None:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise _fail("--plot needs matplotlib: pip install 'tessera[plot]'") from None
        if bound:
            from scheduler.replay.bound import BoundUnavailable, require_highs

            try:
                require_highs()  # before the replay, not after it
            except BoundUnavailable as exc:
                raise _fail(str(exc)) from None
        err = output_console(stderr=True)
        try:
            node_rows = load_nodes(_resolve(nodes, NODE_LIST, "--nodes"))
            pod_rows = load_pods(_resolve(pods, POD_LIST, "--pods"))
            ref_curves = None
            if reference is not None:
                from scheduler.replay.reference import load_reference

                ref_curves = load_reference(reference)
        except TraceError as exc:
            raise _fail(str(exc)) from None
        _report_rows(err, node_rows)
        _report_rows(err, pod_rows)
        capacity = capacity_milli(node_rows.rows)
        if capacity <= 0:
            raise _fail("the node list has no GPU: nothing to replay")
        try:
            xp = get_namespace(backend, problem_gpus=capacity // 1000)
        except BackendError as exc:
            raise _fail(str(exc)) from None

        # One progress task per policy; its total is known up front (arrival order is cheap to compute).
        per_seed = {s: len(arrival_order(pod_rows.rows, s, tune, capacity)) for s in seed_list}
        results: list[PolicyResult] = []
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=err, transient=output == "json" and not err.is_terminal,
        ) as progress:  # fmt: skip
            for name in policies:
                task = progress.add_task(f"{name} seed {seed_list[0]}", total=sum(per_seed.values()))
                hook = functools.partial(_advance, progress, task, name, seed_list, per_seed)
                results.append(
                    run_policy(
                        xp,
                        node_rows.rows,
                        pod_rows.rows,
                        name,
                        seed_list,
                        tune=tune,
                        on_seed_progress=hook,
                        consolidate=consolidate,
                    )
                )
        bound_doc = _bounds(node_rows.rows, pod_rows.rows, seed_list, tune) if bound else None
        # Per policy: the bound for placements that place the fractions its run placed (how far its
        # choices of where, not of which pods, are from the best).
        floors = (
            {r.policy: _bounds(node_rows.rows, pod_rows.rows, seed_list, tune, r) for r in results}
            if bound
            else None
        )
        if plot is not None:
            from scheduler.replay.plot import plot_unallocated

            try:
                plot_unallocated(
                    plot, {r.policy: r.curve for r in results}, ref_curves,
                    bound=None if bound_doc is None else bound_doc["mean"],
                )  # fmt: skip
            except OSError as exc:
                raise _fail(f"cannot write plot {plot}: {exc}") from None
            err.print(f"plot written to {plot}", highlight=False)
        if report is not None:
            _write_report(report, results, reference, seed_list, tune)
            err.print(f"report written to {report}", highlight=False)
        if output == "json":
            doc = [r.to_json() for r in results]
            if bound_doc is not None and floors is not None:
                for entry in doc:
                    entry["lower_bound"] = bound_doc
                    entry["lower_bound_same_fractions"] = floors[entry["policy"]]
            sys.stdout.write(json.dumps(doc[0] if len(doc) == 1 else doc, indent=2) + "\n")
        else:
            output_console().print(_table(results, bound_doc, floors))
