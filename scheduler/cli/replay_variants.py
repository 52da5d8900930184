"""`tessera replay --all-variants DIR`: the whole workload study as OUT.json, OUT.md and OUT.png."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from scheduler.api.cli import output_console
from scheduler.placement.registry import policy_names
from scheduler.replay.trace import TraceError
from scheduler.replay.variants import GPU_NODE_LIST, discover, node_list_notes, run_variants
from scheduler.replay.variants_report import TIE, write_all


def _fail(message: str) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def run_all_variants(
    directory: Path,
    policies: list[str],
    seeds: list[int],
    tune: float,
    backend: str | None,
    with_bound: bool,
    out: Path,
    jobs: int,
    reference: Path | None,
    nodes: Path | None,
) -> None:
    err = output_console(stderr=True)
    policy_seeds: dict[str, list[int]] = {}
    for spec in list(policies):  # "fgd@42-51": this column has its own seeds
        name, _, own = spec.partition("@")
        if own:
            from scheduler.cli.replay import parse_seeds

            try:
                policy_seeds[name] = parse_seeds(own)
            except typer.BadParameter as exc:
                raise _fail(f"{spec}: {exc}") from None
    policies = list(dict.fromkeys(spec.partition("@")[0] for spec in policies))
    unknown = [p for p in policies if p not in policy_names()]
    if unknown:
        raise _fail(f"unknown policy {', '.join(unknown)}; choose from {', '.join(policy_names())}")
    if not directory.is_dir():
        raise _fail(f"{directory}: not a directory")
    if jobs < 1:
        raise _fail(f"--jobs must be at least 1, not {jobs}")
    nodes_csv = nodes or directory / GPU_NODE_LIST
    try:
        pod_lists = discover(directory)
        table = None
        if reference is not None:
            from scheduler.replay.reference import load_reference_table

            table = load_reference_table(reference)
        if with_bound:
            from scheduler.replay.bound import BoundUnavailable, require_highs

            try:
                require_highs()  # fail before hours of replays, not after
            except BoundUnavailable as exc:
                raise _fail(str(exc)) from None
        total = len(pod_lists) * len(policies) + (len(pod_lists) if with_bound else 0)
        seeds_of = {p: policy_seeds.get(p, seeds) for p in policies}
        done = 0

        def tick(workload: str, what: str) -> None:
            nonlocal done
            done += 1
            err.print(f"[{done}/{total}] {workload} {what}", highlight=False)

        rows = run_variants(
            nodes_csv, pod_lists, policies, seeds, tune=tune, backend=backend, with_bound=with_bound,
            jobs=jobs, reference=table, on_done=tick, units_dir=out.parent / f"{out.name}.units",
            policy_seeds=policy_seeds,
        )  # fmt: skip
        notes = node_list_notes(directory)
    except TraceError as exc:
        raise _fail(str(exc)) from None
    try:
        written = write_all(out, rows, policies, seeds_of, tune, notes)
    except OSError as exc:
        raise _fail(f"cannot write {out}.*: {exc.strerror}") from None
    everywhere = [p for p in policies if all(p in r.best(TIE) for r in rows)]
    err.print("written: " + ", ".join(str(p) for p in written), highlight=False)
    err.print(
        f"best or within {TIE} point on every pod list: {', '.join(everywhere) or 'none'}", highlight=False
    )
