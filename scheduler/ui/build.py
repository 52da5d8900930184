"""Build a `DashboardView` from a running (or simulated) scheduler and, optionally, node reports.

Reads only: the cache's arrays and dicts and the last session's queue tree and pending reasons. The
scheduling loop may be mutating those dicts from another thread while a page is served; a build that
trips over that is retried (pass a lock to `serve_ui` for exact consistency).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.api.report import GPUNodeReport, GPUReport
from scheduler.cycle import Scheduler
from scheduler.model.reasons import PendingReason, Reason
from scheduler.model.resources import RESOURCE_NAMES
from scheduler.model.types import NodeInfo, Placement, PodInfo, PodPhase
from scheduler.queues import QueueTree
from scheduler.ui.colors import OTHER_QUEUE, queue_colors
from scheduler.ui.min_runtime import elastic_notes, protection_notes, queue_min_runtime
from scheduler.ui.usage_spark import usage_note, with_usage
from scheduler.ui.view import (
    DashboardView,
    GPUCell,
    Measured,
    NodeRow,
    PendingEntry,
    PendingGroup,
    PendingSubject,
    PodUse,
    QueueFigures,
    QueueView,
    Slice,
    Totals,
)

log = logging.getLogger(__name__)

# Labels that name a node's pool on common platforms, most specific first.
POOL_LABELS = (
    "tessera.dev/pool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "node-pool",
    "pool",
)
WAITING = PendingReason(Reason.WAITING, "arrived after the last scheduling cycle; not considered yet")
_RETRIES = 5
QueueOf = Callable[[PodInfo | None], str]


def node_pool(node: NodeInfo) -> str:
    return next((node.labels[k] for k in POOL_LABELS if node.labels.get(k)), "-")


def build_view(
    scheduler: Scheduler,
    reports: Iterable[GPUNodeReport] = (),
    *,
    title: str = "Tessera cluster",
    source: str = "live",
    timeline: Iterable[tuple[float, float]] = (),
    now_epoch_s: float | None = None,
) -> DashboardView:
    """`now_epoch_s`: the clock pods' creationTimestamps are read against, to say how long each
    pending pod has waited (default: wall time, or the simulated clock of a simulated cluster)."""
    reports = list(reports)
    timeline = tuple(timeline)
    now = now_epoch_s if now_epoch_s is not None else scheduler.cluster.epoch_s()
    for attempt in range(_RETRIES):
        try:
            return _build(scheduler, reports, title=title, source=source, timeline=timeline, now=now)
        # The loop moved on mid-read: "dictionary changed size during iteration", or arrays regrown
        # between two reads (a row beyond the copy, a node gone from the tree). Read again.
        except (RuntimeError, IndexError, KeyError) as exc:
            if attempt == _RETRIES - 1:
                raise
            log.debug("view build raced the scheduling loop (%s); retrying", exc)
    raise AssertionError("unreachable")


def _build(
    scheduler: Scheduler,
    reports: list[GPUNodeReport],
    *,
    title: str,
    source: str,
    timeline: tuple[tuple[float, float], ...],
    now: float,
) -> DashboardView:
    cache = scheduler.cache
    session = scheduler.last_session
    tree = session.tree if session is not None else QueueTree(list(cache.queues.values()))
    pods = dict(cache.pods)
    placements = dict(cache.placements)
    job_queue: dict[str, str] = {}
    if session is not None:
        for job in session.jobs:
            for p in job.members:
                job_queue[p.uid] = job.queue

    def queue_of(pod: PodInfo | None) -> str:
        if pod is None or not pod.ours:
            return OTHER_QUEUE
        return job_queue.get(pod.uid, pod.queue)

    queues = with_usage(_queues(tree), scheduler)
    colors = queue_colors([q.name for q in queues])
    facts = [session.facts(job) for job in session.jobs] if session is not None else []
    notes = protection_notes(tree, facts, now)
    nodes = _nodes(scheduler, pods, placements, {r.spec.node: r for r in reports}, queue_of, notes)
    reasons = dict(scheduler.last_reasons)
    on_node = cache.ledger.on_node  # a pod bound this cycle is on its node before the watch says so
    pending_pods = [p for p in pods.values() if p.ours and p.phase == PodPhase.PENDING and not on_node(p)]
    pending = _pending(pending_pods, reasons, queue_of, now, elastic_notes(facts))
    cells = [g for n in nodes for g in n.gpus]
    totals = Totals(
        nodes=len(nodes),
        gpus=len(cells),
        unhealthy_gpus=sum(1 for g in cells if not g.healthy),
        allocated_milli=sum(g.used_milli for g in cells),
        stranded_milli=sum(g.free_milli for g in cells if g.healthy and 0 < g.free_milli < MILLI_PER_GPU),
        running_pods=sum(1 for p in pods.values() if on_node(p)),
        pending_pods=len(pending_pods),
    )
    return DashboardView(
        title=title,
        source=source,
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        totals=totals,
        nodes=tuple(nodes),
        queues=tuple(queues),
        pending=tuple(pending),
        timeline=timeline,
        warnings=_warnings(scheduler, tree),
        queue_colors=colors,
        usage_note=usage_note(scheduler),
    )


def _warnings(scheduler: Scheduler, tree: QueueTree) -> tuple[str, ...]:
    """What the scheduler warns about now (one line per problem), then objects it could not use."""
    current = list(dict.fromkeys(scheduler.warnings.values()))
    queue_errors = [e for e in tree.errors if e not in tree.problems.values() or not current]
    return tuple(dict.fromkeys([*current, *queue_errors, *scheduler.cache.errors[-20:]]))


def _measured(report: GPUNodeReport, gpu: GPUReport) -> Measured:
    return Measured(
        memory_used_mib=gpu.memory_used_mib,
        memory_total_mib=gpu.memory_total_mib,
        utilization_pct=gpu.utilization_pct,
        temperature_c=gpu.temperature_c,
        power_w=gpu.power_w,
        observed_at=report.spec.observed_at,
        pods=tuple(
            PodUse(f"{s.namespace}/{s.pod}", s.memory_used_mib, s.memory_limit_mib, s.over_limit)
            for s in gpu.shares
        ),
    )


def _nodes(
    scheduler: Scheduler,
    pods: dict[str, PodInfo],
    placements: dict[str, Placement],
    reports: dict[str, GPUNodeReport],
    queue_of: QueueOf,
    notes: dict[str, str],
) -> list[NodeRow]:
    state = scheduler.cache.state
    slices: dict[tuple[int, int], list[Slice]] = {}
    for uid, pl in placements.items():
        pod = pods.get(uid)
        key = pod.key if pod is not None else uid
        gang = pod.group if pod is not None else None
        for share in pl.gpus:
            slices.setdefault((pl.node, share.slot), []).append(
                Slice(
                    pod=key,
                    queue=queue_of(pod),
                    milli=share.milli,
                    mib=share.mib,
                    gang=gang,
                    protected=notes.get(uid, ""),
                )
            )
    for key, held in list(scheduler.cache.ledger.reserved.items()):  # places kept for pods being moved
        queue = held.owner.queue if held.owner is not None else OTHER_QUEUE
        for share in held.placement.gpus:
            slices.setdefault((held.placement.node, share.slot), []).append(
                Slice(pod=f"{key} (reserved)", queue=queue, milli=share.milli, mib=share.mib, gang=None)
            )
    # Host copies once: on CuPy every element read would be a device round trip.
    free = state.host(state.free_milli)
    total = state.host(state.total_mib)
    present = state.host(state.present)
    healthy = state.host(state.healthy)
    domain = state.host(state.domain)
    innermost = [(t, state.domains.column[(t, len(keys) - 1)]) for t, keys in state.domains.levels.items()]
    rows: list[NodeRow] = []
    for row, node in enumerate(list(state.nodes)):
        if node is None:
            continue
        report = reports.get(node.name)
        by_index = {g.index: g for g in report.spec.gpus} if report is not None else {}
        cells = []
        for j in range(min(state.max_gpus, free.shape[1])):
            if not bool(present[row, j]):
                continue
            rep = by_index.get(j)
            ok = bool(healthy[row, j]) and (rep is None or rep.health != "Unhealthy")
            cells.append(
                GPUCell(
                    index=j,
                    uuid=rep.uuid if rep is not None else node.uuid(j),
                    total_mib=int(total[row, j]),
                    free_milli=int(free[row, j]),
                    healthy=ok,
                    slices=tuple(sorted(slices.get((row, j), []), key=lambda s: (s.queue, s.pod))),
                    measured=_measured(report, rep) if report is not None and rep is not None else None,
                    health_reason=rep.health_reason if rep is not None else None,
                )
            )
        rows.append(
            NodeRow(
                name=node.name,
                pool=node_pool(node),
                model=node.gpu_model or ("no GPU" if not node.gpu_count else "-"),
                schedulable=node.usable and not node.unschedulable,
                gpus=tuple(cells),
                domains=tuple(
                    (t, state.domains.name(col, int(domain[row, col])))
                    for t, col in innermost
                    if row < domain.shape[0] and int(domain[row, col]) >= 0
                ),
            )
        )
    rows.sort(key=lambda r: (r.domain, r.name))  # a topology's domains together (nodes outside it first)
    return rows


def _queues(tree: QueueTree) -> list[QueueView]:
    out: list[QueueView] = []

    for name, depth in tree.walk():
        node = tree.nodes[name]
        figures = {
            r: QueueFigures(
                quota=node.resource(r).quota,
                fair_share=node.fair_share.get(r),
                allocated=node.allocated.get(r),
                requested=node.requested.get(r),
                limit=node.resource(r).limit,
                over_quota_weight=node.resource(r).over_quota_weight,
            )
            for r in RESOURCE_NAMES
        }
        out.append(
            QueueView(
                name,
                node.parent,
                depth,
                node.is_leaf,
                node.spec.priority,
                figures,
                queue_min_runtime(tree, name),
            )
        )
    return out


def _pending(
    pending: list[PodInfo],
    reasons: dict[str, PendingReason],
    queue_of: QueueOf,
    now: float,
    notes: dict[str, str],
) -> list[PendingGroup]:
    # reason -> message -> subject key -> (subject fields, pods)
    grouped: dict[str, dict[str, dict[str, list[PodInfo]]]] = {}
    for pod in sorted(pending, key=lambda p: (p.created_s, p.key)):
        why = reasons.get(pod.uid, WAITING)
        subject = f"gang:{pod.group}" if pod.group else f"pod:{pod.key}"
        grouped.setdefault(why.reason, {}).setdefault(why.message, {}).setdefault(subject, []).append(pod)
    groups = []
    for reason, by_message in grouped.items():
        entries = []
        for message, by_subject in by_message.items():
            subjects = []
            for key, members in by_subject.items():
                first = members[0]
                req = first.request.describe() if not first.error else "invalid request"
                gang = key.startswith("gang:")
                subjects.append(
                    PendingSubject(
                        kind="gang" if gang else "pod",
                        key=key.split(":", 1)[1],
                        queue=queue_of(first),
                        pods=len(members),
                        request=f"{req} × {len(members)} pods" if gang else req,
                        waiting_s=now - first.created_s if 0 < first.created_s <= now else None,
                        note=notes.get(key.split(":", 1)[1], "") if gang else "",
                    )
                )
            entries.append(PendingEntry(message=message, subjects=tuple(subjects)))
        entries.sort(key=lambda e: -e.pods)
        groups.append(PendingGroup(reason=reason, entries=tuple(entries)))
    groups.sort(key=lambda g: (-g.pods, g.reason))
    return groups
