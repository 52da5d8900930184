"""`tessera why POD` (also `kubectl tessera why POD`): where a pod runs, or why it waits.

Reads what the scheduler published (the pod's PodScheduled condition and Events, Queue and PodGroup
status) and checks the pod itself with the scheduler's own parser, so a bad annotation, an unknown or
non-leaf queue or a missing PodGroup is named even when no scheduler is running."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from scheduler.api.assignment import GPUAssignment
from scheduler.api.cli import FAILURE, USAGE, check_choice, fail, output_console
from scheduler.api.keys import GPU_ASSIGNMENT, SCHEDULER_NAME
from scheduler.api.podgroup import PodGroup
from scheduler.api.queue import Queue
from scheduler.cli.cluster_reader import ClusterReader, KubeReader, ReadError
from scheduler.cli.kube import ContextOption, KubeconfigOption, connect
from scheduler.model.jobs import group_priority
from scheduler.model.parse import parse_pod
from scheduler.model.types import PodInfo
from scheduler.queues.tree import QueueTree
from scheduler.ui.fmt import gpus

Obj = dict[str, Any]


@dataclass
class Explanation:
    pod: str
    state: str  # Running on <node> | Pending | Succeeded | Failed | not scheduled by Tessera
    facts: list[str] = field(default_factory=list)  # what is true of the pod
    reasons: list[str] = field(default_factory=list)  # why it waits; for a pod that does not wait, problems
    events: list[str] = field(default_factory=list)
    waiting: bool = True  # not on a node and not finished: `reasons` say why it waits

    def to_json(self) -> Obj:
        return {
            "pod": self.pod,
            "state": self.state,
            "facts": self.facts,
            "reasons": self.reasons,
            "waiting": self.waiting,
            "events": self.events,
        }


def _condition(pod: Obj, kind: str) -> Obj | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _queue_facts(reader: ClusterReader, queue: str, out: Explanation) -> None:
    queues = []
    for obj in reader.list("Queue"):
        try:
            queues.append(Queue.model_validate(obj))
        except ValidationError:
            if (obj.get("metadata") or {}).get("name") == queue:
                out.reasons.append(
                    f"queue {queue} is invalid, so the scheduler ignores it (see `tessera queues`)"
                )
                return
    tree = QueueTree(queues)
    problem = tree.leaf_error(queue)
    if problem:
        out.reasons.append(problem)
        return
    q = next((q for q in queues if q.name == queue), None)
    res = tree.nodes[queue].resource("gpu")
    quota = "unlimited" if res.quota < 0 else f"{res.quota:g}"
    limit = "none" if res.limit < 0 else f"{res.limit:g}"
    line = f"queue {queue}: GPU quota {quota}, limit {limit}"
    if q is not None and q.status is not None:
        alloc, share = q.status.allocated.get("gpu", 0.0), q.status.fair_share.get("gpu")
        line += f", {alloc:g} allocated" + (f" of a fair share of {share:g}" if share is not None else "")
    elif q is None:
        line += " (implicit: no Queue object named default)"
    out.facts.append(line)


def _podgroup(reader: ClusterReader, group: str) -> PodGroup | str:
    """The pod's PodGroup, or what is wrong with it (missing or invalid)."""
    namespace, name = group.split("/", 1)
    obj = reader.get("PodGroup", name, namespace)
    if obj is None:
        return (
            f"PodGroup {group} does not exist: the pods that name it are scheduled as one gang of those "
            "present; create it (minMember) or remove the annotation"
        )
    try:
        return PodGroup.model_validate(obj)
    except ValidationError as exc:
        return f"PodGroup {group} is invalid: {exc.errors()[0]['msg']}"


def _priority(reader: ClusterReader, info: PodInfo, group: str | None, pg: PodGroup | None) -> str:
    """The priority the pod is scheduled with: its gang's when its PodGroup names a priority class (or a
    preemptibility), as the scheduler reads it (`model.jobs.group_priority`), else its own."""
    if group is None or pg is None or not (pg.spec.priority_class_name or pg.spec.preemptibility):
        priority, preemptible, whose = info.priority, info.preemptible, ""
    else:
        name = pg.spec.priority_class_name
        try:
            cls = reader.get("PriorityClass", name) if name else None
        except ReadError:  # not allowed to read PriorityClasses: the built-in table, as the scheduler's
            cls = None
        value = cls.get("value") if cls is not None else None
        classes = {name: value} if name and isinstance(value, int) and not isinstance(value, bool) else {}
        priority, preemptible = group_priority(pg, info, classes)
        whose = f", its gang's: PodGroup {group} names {name}" if name else f", its gang's (PodGroup {group})"
    return f"priority {priority} ({'preemptible' if preemptible else 'non-preemptible'}{whose})"


def _group_facts(group: str, pg: PodGroup | str, out: Explanation) -> None:
    if isinstance(pg, str):
        out.reasons.append(pg)
        return
    status = pg.status
    line = f"gang {group}: minMember {pg.spec.min_member}"
    if status is not None:
        line += f", {status.running} running, phase {status.phase}"
        for c in status.conditions:
            if c.status == "False" and c.message and out.waiting:  # why the gang waits: not a finished pod's
                out.reasons.append(f"gang {group}: {c.message}")
    out.facts.append(line)


def explain(reader: ClusterReader, namespace: str, name: str) -> Explanation | None:
    """Everything the cluster says about one pod; None when the pod does not exist."""
    pod = reader.get("Pod", name, namespace)
    if pod is None:
        return None
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    out = Explanation(pod=f"{namespace}/{name}", state=str(status.get("phase") or "Pending"))
    scheduler_name = spec.get("schedulerName") or "default-scheduler"
    if scheduler_name != SCHEDULER_NAME:
        out.state = "not scheduled by Tessera"
        out.reasons.append(
            f"spec.schedulerName is {scheduler_name!r}; Tessera only schedules pods with schedulerName: {SCHEDULER_NAME}"
        )
        return out
    info = parse_pod(pod)
    node = spec.get("nodeName")
    finished = out.state in ("Succeeded", "Failed")
    out.waiting = not node and not finished
    pg = _podgroup(reader, info.group) if info.group else None
    out.facts.append(
        f"asks for {info.request.describe()}, {info.cpu_milli / 1000:g} CPU cores, {info.memory_mib / 1024:g} GiB memory; "
        + _priority(reader, info, info.group, pg if isinstance(pg, PodGroup) else None)
    )
    if finished and (status.get("reason") or status.get("message")):
        out.facts.append(f"{out.state.lower()}: " + ": ".join(
            str(status[k]) for k in ("reason", "message") if status.get(k)
        ))  # fmt: skip
    if info.error and out.waiting:
        out.reasons.append(f"invalid request, never placed: {info.error}")
    elif info.error and not finished:
        out.reasons.append(f"its request is invalid now ({info.error}); it keeps what it was bound with")
    if node:
        out.state = f"{out.state} on {node}"
        raw = (pod.get("metadata") or {}).get("annotations", {}).get(GPU_ASSIGNMENT)
        if raw:
            try:
                a = GPUAssignment.from_annotation(raw)
                shares = ", ".join(
                    f"GPU {g.index} ({gpus(g.milli)} of it, {g.memory_mib} MiB)" for g in a.gpus
                )
                out.facts.append(f"placed by Tessera on {a.node}: {shares or 'no GPU'}")
            except ValueError as exc:
                out.reasons.append(f"its {GPU_ASSIGNMENT} annotation is unreadable: {exc}")
    _queue_facts(reader, info.queue, out)
    if info.group and pg is not None:
        _group_facts(info.group, pg, out)
    if out.waiting:
        cond = _condition(pod, "PodScheduled")
        if cond is not None and cond.get("status") == "False":
            out.reasons.insert(
                0, f"{cond.get('reason') or 'Unschedulable'}: {cond.get('message') or '(no message)'}"
            )
        elif not out.reasons:
            out.reasons.append(
                "the scheduler has not reported on it yet: is tessera-scheduler running? (`tessera doctor`)"
            )
    events = reader.list("Event", namespace, fields=f"involvedObject.name={name}")
    events.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    for e in events[-8:]:
        count = f" (x{e['count']})" if (e.get("count") or 1) > 1 else ""
        out.events.append(f"{e.get('type', 'Normal')} {e.get('reason', '')}: {e.get('message', '')}{count}")
    return out


def render(console: Console, e: Explanation) -> None:
    console.print(f"[bold]{escape(e.pod)}[/]: {escape(e.state)}")
    for f in e.facts:
        console.print(f"  {escape(f)}")
    if e.reasons:
        console.print("[bold]why it waits[/]" if e.waiting else "[bold]problems[/]")
        for r in e.reasons:
            console.print(f"  [yellow]•[/] {escape(r)}")
    if e.events:
        console.print("[bold]recent events[/]")
        for ev in e.events:
            console.print(f"  {escape(ev)}")


def why(
    pod: Annotated[str, typer.Argument(metavar="POD", help="Pod name (or NAMESPACE/NAME).")],
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", metavar="NS", help="Namespace (default: the context's)."),
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="text or json.")] = "text",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Where a pod runs and on which GPUs, or why it is still pending."""
    check_choice(output, ("text", "json"), "--output")
    if "/" in pod and namespace is None:
        namespace, pod = pod.split("/", 1)
    api = connect(kubeconfig, context)
    ns = namespace or _context_namespace(kubeconfig, context)
    try:
        found = explain(KubeReader(api), ns, pod)
    except ReadError as exc:
        raise fail(str(exc), FAILURE) from None
    if found is None:
        raise fail(f"pod {ns}/{pod} not found (wrong namespace? pass -n NS)", USAGE)
    if output == "json":
        typer.echo(json.dumps(found.to_json(), indent=2))
    else:
        render(output_console(highlight=False), found)


def _context_namespace(kubeconfig: str | None, context: str | None) -> str:
    from kubernetes import config

    try:
        _, active = config.list_kube_config_contexts(config_file=kubeconfig)
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = next((c for c in contexts if c["name"] == context), active) if context else active
        return str((chosen or {}).get("context", {}).get("namespace") or "default")
    except (config.ConfigException, OSError):
        return "default"


def register(app: typer.Typer) -> None:
    app.command("why", short_help="Where a pod runs, or why it waits.")(why)
