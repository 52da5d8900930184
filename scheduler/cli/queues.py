"""`tessera queues` (also `kubectl tessera queues`): the queue tree with quota, limit, fair share and
allocation, in GPUs, cores and GiB, and every problem the scheduler has with a queue.

KAI Scheduler's Queues (scheduling.run.ai/v2) are read as the scheduler's `--kai-compat` reads them:
translated into Tessera's (docs/kai-compat.md), Tessera's own winning a shared name. On a cluster they are
listed when the API serves them (their allocation from the status Tessera writes on them; KAI's Queue has
no fair share)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from scheduler.api.cli import FAILURE, check_choice, fail, output_console, warning_line, yaml_problem
from scheduler.api.duration import show_duration
from scheduler.api.kai import is_kai, status_from_kai, translate
from scheduler.api.queue import Queue, QueueStatus
from scheduler.cli.cluster_reader import KubeReader, ReadError
from scheduler.cli.kube import ContextOption, KubeconfigOption, connect
from scheduler.queues.min_runtime import MinRuntimes
from scheduler.queues.tree import QueueTree

OUTPUTS = ("table", "json")
Obj = dict[str, Any]


@dataclass(frozen=True)
class QueueRow:
    name: str
    parent: str | None
    depth: int
    leaf: bool
    priority: int
    spec: dict[str, dict[str, float]]  # resource -> quota/limit/overQuotaWeight, internal units
    status: dict[str, dict[str, float]]  # allocated/fairShare/requested -> resource -> internal units
    implicit: bool = False  # the scheduler's own `default`, when no Queue object has that name
    min_runtime_s: tuple[float, float] = (0.0, 0.0)  # (preempt, reclaim) as its jobs get them, inherited

    def to_json(self) -> Obj:
        return {
            "name": self.name,
            "parent": self.parent,
            "leaf": self.leaf,
            "priority": self.priority,
            "implicit": self.implicit,
            "gpu": {"quota": self.spec["gpu"]["quota"], "limit": self.spec["gpu"]["limit"]}
            | {k: v.get("gpu") for k, v in self.status.items()},
            "cpuCores": {
                "quota": _cores(self.spec["cpu"]["quota"]),
                "limit": _cores(self.spec["cpu"]["limit"]),
            },
            "memoryGiB": {
                "quota": _gib(self.spec["memory"]["quota"]),
                "limit": _gib(self.spec["memory"]["limit"]),
            },
            "minRuntimeSeconds": {"preempt": self.min_runtime_s[0], "reclaim": self.min_runtime_s[1]},
        }


def _cores(milli: float) -> float:
    return milli if milli < 0 else milli / 1000


def _gib(mib: float) -> float:
    return mib if mib < 0 else round(mib / 1024, 3)


def queue_rows(objects: Iterable[Obj]) -> tuple[list[QueueRow], list[str]]:
    """The queue tree as the scheduler builds it, and one line per problem with a queue."""
    problems: list[str] = []
    queues: list[Queue] = []
    for obj in objects:
        name = (obj.get("metadata") or {}).get("name", "?")
        try:
            queues.append(Queue.model_validate(obj))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            problems.append(f"queue {name} is invalid and ignored by the scheduler: {where}: {err['msg']}")
    tree = QueueTree(queues)
    runtimes = MinRuntimes(tree)
    problems += [f"{e} (treated as a top-level queue)" if "does not exist" in e else e for e in tree.errors]
    statuses = {q.name: q.status or QueueStatus() for q in queues}
    rows: list[QueueRow] = []

    for name, depth in tree.walk():
        node = tree.nodes[name]
        status = statuses.get(name, QueueStatus())
        spec = {
            r: {
                "quota": node.resource(r).quota,
                "limit": node.resource(r).limit,
                "overQuotaWeight": node.resource(r).over_quota_weight,
            }
            for r in ("gpu", "cpu", "memory")
        }
        figures = {
            "allocated": status.allocated,
            "fairShare": status.fair_share,
            "requested": status.requested,
        }
        implicit = name not in statuses
        rows.append(
            QueueRow(
                name,
                node.parent,
                depth,
                node.is_leaf,
                node.spec.priority,
                spec,
                figures,
                implicit,
                runtimes.configured(name),
            )
        )
    return rows, problems


def _amount(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if v < 0:
        return "∞"
    return f"{v:,.2f}".rstrip("0").rstrip(".") + unit


def queue_table(rows: list[QueueRow]) -> Table:
    t = Table(box=None, header_style="bold", pad_edge=False)
    columns = ("QUEUE", "PRIO", "GPU ALLOC", "FAIR SHARE", "QUOTA", "LIMIT", "CPU QUOTA", "MEM QUOTA")
    runtimes = any(any(r.min_runtime_s) for r in rows)  # a column only where some queue sets one
    for col in (*columns, "MIN RUNTIME P/R") if runtimes else columns:
        t.add_column(col, justify="left" if col == "QUEUE" else "right", no_wrap=True)
    for r in rows:
        label = "  " * r.depth + r.name + ("" if r.leaf else "/") + (" (implicit)" if r.implicit else "")
        t.add_row(
            escape(label),
            str(r.priority),
            _amount(r.status["allocated"].get("gpu", 0.0)),
            _amount(r.status["fairShare"].get("gpu")),
            _amount(r.spec["gpu"]["quota"]),
            _amount(r.spec["gpu"]["limit"]),
            _amount(_cores(r.spec["cpu"]["quota"])),
            _amount(_gib(r.spec["memory"]["quota"]), " GiB"),
            *(
                [f"{show_duration(r.min_runtime_s[0])}/{show_duration(r.min_runtime_s[1])}"]
                if runtimes
                else []
            ),
        )
    return t


def with_kai(objects: Iterable[Obj]) -> tuple[list[Obj], list[str]]:
    """Queue objects as the scheduler uses them with KAI compatibility: Tessera's as they are, KAI's
    translated (with their status), Tessera's winning a shared name; and a line per KAI queue that is
    invalid, shadowed, or translated with a difference from KAI."""
    native: dict[str, Obj] = {}
    kai: dict[str, Obj] = {}
    notes: list[str] = []
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name", "?"))
        if not is_kai(obj):
            native[name] = obj
            continue
        try:
            t = translate(obj)
        except ValueError as exc:
            notes.append(f"KAI queue {name} is invalid and ignored by the scheduler: {_one_line(exc)}")
            continue
        notes += [f"KAI queue {name}: {n}" for n in t.notes]
        status = status_from_kai(obj.get("status"))
        kai[name] = {**t.obj, "status": status.model_dump(by_alias=True)}
    for name in sorted(native.keys() & kai.keys()):
        notes.append(f"KAI queue {name} is ignored: Tessera's Queue of the same name is used")
        del kai[name]
    return [*native.values(), *kai.values()], notes


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError) and exc.errors():
        err = exc.errors()[0]
        return f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def load_queue_files(paths: Iterable[Path]) -> list[Obj]:
    """The Queue objects (Tessera's and KAI's) of YAML files, or of the manifest files of folders."""
    import yaml

    from scheduler.sim.loader import expand

    out: list[Obj] = []
    for path in expand(paths):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except OSError as exc:
            raise fail(f"cannot read {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise fail(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
        for d in docs:
            items = d.get("items") if isinstance(d, dict) and "items" in d else [d]
            out += [o for o in items or [] if isinstance(o, dict) and o.get("kind") == "Queue"]
    return out


def queues(
    output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json.")] = "table",
    from_file: Annotated[
        list[Path] | None,
        typer.Option(
            "--from-file",
            "-f",
            metavar="FILE",
            help="Read Queues (Tessera's or KAI Scheduler's) from YAML files or folders, not the cluster.",
        ),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """The queue tree: priority, GPUs allocated against fair share, quota and limit, CPU and memory
    quota; then every problem the scheduler has with a queue. ∞ = unlimited (-1)."""
    check_choice(output, OUTPUTS, "--output")
    if from_file:
        objects = load_queue_files(from_file)
    else:
        try:
            reader = KubeReader(connect(kubeconfig, context))
            objects = reader.list("Queue") + reader.list("KaiQueue")
        except ReadError as exc:
            raise fail(str(exc), FAILURE) from None
    objects, kai_notes = with_kai(objects)
    rows, problems = queue_rows(objects)
    problems = kai_notes + problems
    if output == "json":
        typer.echo(json.dumps({"queues": [r.to_json() for r in rows], "problems": problems}, indent=2))
        return
    out = output_console()
    out.print(queue_table(rows))
    if not any(o for o in objects):
        out.print("No Queue objects: pods go to an implicit `default` queue (docs/queues.md).")
    for p in problems:
        warning_line(p)


def register(app: typer.Typer) -> None:
    app.command("queues", short_help="The queue tree: quota, fair share, use.")(queues)
