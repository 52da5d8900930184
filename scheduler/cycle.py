"""The scheduling loop: apply watch events, open a session, run the actions, report what is pending."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from scheduler.actions import DEFAULT_ACTIONS, make_actions
from scheduler.api.meta import Condition
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.backend import get_namespace
from scheduler.budget import Budget, BudgetLimits
from scheduler.cache import Cache
from scheduler.cluster import Cluster
from scheduler.inflight import Deferred
from scheduler.placement.incremental import IncrementalPlacer
from scheduler.placement.registry import make_policy
from scheduler.queues.usage_history import TimeBasedFairShare, UsageParams
from scheduler.queues.usage_store import MemoryUsageStore, UsageStore
from scheduler.reasons import PendingReason
from scheduler.session import Session, cluster_capacity

log = logging.getLogger(__name__)
WarningKey = tuple[str, str | None, str, str]


@dataclass(frozen=True)
class SchedulerConfig:
    policy: str = "binpack"
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    backend: str | None = None  # None: TESSERA_ARRAY_BACKEND / auto
    max_gpus_per_node: int = 8
    expected_nodes: int = 64
    # Search budgets count work, so a simulation decides the same on any machine; the live scheduler
    # passes `BudgetLimits.live()` (a wall-clock cap on top).
    budget: BudgetLimits = field(default_factory=BudgetLimits)
    usage: UsageParams | None = None  # time-based fair share (docs/fairshare.md); None: off


@dataclass
class CycleResult:
    started_s: float
    duration_s: float
    action_s: dict[str, float]
    bound: int
    evicted: int
    pending: int
    reasons: dict[str, PendingReason] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    phase_s: dict[str, float] = field(default_factory=dict)  # state_update, scoring, commit, other
    # Unix time by which a cycle should run again though nothing happens (a victim's minimum runtime ends)
    retry_at_epoch_s: float | None = None


class Scheduler:
    def __init__(
        self, cluster: Cluster, config: SchedulerConfig | None = None, usage_store: UsageStore | None = None
    ) -> None:
        self.cluster = cluster
        self.config = config or SchedulerConfig()
        problem = self.config.expected_nodes * self.config.max_gpus_per_node
        self.xp = get_namespace(self.config.backend, problem_gpus=problem)
        self.cache = Cache.create(
            self.xp, max_gpus=self.config.max_gpus_per_node, capacity=self.config.expected_nodes
        )
        self.policy = make_policy(self.config.policy)
        # Kept across cycles, so its per-demand scores stay warm.
        self.placer = IncrementalPlacer(self.cache.state, self.policy)
        # Victim searches try many plans: whether they fit is asked of a row-local policy (its scores kept
        # per demand and refreshed on the rows a trial touched); the plan applied is placed by `policy`.
        self.probe = (
            self.placer
            if self.policy.capabilities.row_local
            else IncrementalPlacer(self.cache.state, make_policy("binpack"))
        )
        self.actions = make_actions(self.config.actions)  # ValueError on an unknown name
        self.budget = Budget(self.config.budget)
        self.last_reasons: dict[str, PendingReason] = {}
        self.last_session: Session | None = None
        # (kind, namespace, name, reason) -> message of every warning that holds now (see `Cluster.warn`)
        self.warnings: dict[WarningKey, str] = {}
        # Queues' recent usage, kept in `usage_store` (a ConfigMap in Kubernetes) across restarts.
        params = self.config.usage
        self.fairshare = TimeBasedFairShare(params, usage_store or MemoryUsageStore()) if params else None

    def run_cycle(self) -> CycleResult:
        t0 = time.perf_counter()
        now = self.cluster.now()
        self.cache.apply(self.cluster.drain_events())
        # Binds that were in flight: confirmed, or forgotten (a gang undone whole) before the session opens.
        settled = Deferred()
        self.cache.inflight.settle(self.cluster.bind_outcomes(), self.cache, self.cluster, settled)
        epoch = self.cluster.epoch_s()
        usage = self.fairshare.shares(epoch) if self.fairshare is not None else None
        k_value = self.fairshare.params.k_value if self.fairshare is not None else 1.0
        session = Session.open(
            self.cache, self.placer, now, self.budget, probe=self.probe, epoch_s=epoch, recent_usage=usage,
            k_value=k_value,
        )  # fmt: skip
        settled.replay(session)
        session.add_time("state_update", time.perf_counter() - t0)
        timings: dict[str, float] = {}
        try:
            for action in self.actions:
                ta = time.perf_counter()
                action.execute(session, self.cluster)
                timings[action.name] = time.perf_counter() - ta
        finally:
            if self.cache.ledger.abort():  # an action failed inside a transaction: leave no half of it
                log.error("a transaction was left open by a failing action; rolled back")
            session.close()
        if self.fairshare is not None:  # what the queues hold from now on, until the next cycle
            allocated = {name: node.allocated for name, node in session.tree.nodes.items()}
            self.fairshare.observe(epoch, allocated, cluster_capacity(self.cache.state))
        self._report(session)
        self.last_session = session
        bound = sum(1 for e in session.events if e["type"] == "Scheduled")
        evicted = sum(1 for e in session.events if e["type"] == "Evicted")
        duration = time.perf_counter() - t0
        phases = dict(session.timings)
        phases["other"] = max(0.0, duration - sum(phases.values()))
        return CycleResult(
            started_s=now, duration_s=duration, action_s=timings, bound=bound, evicted=evicted,
            pending=len(session.reasons), reasons=dict(session.reasons), events=session.events, phase_s=phases,
            retry_at_epoch_s=session.retry_at,
        )  # fmt: skip

    def _report(self, session: Session) -> None:
        pods = self.cache.pods
        for uid, why in session.reasons.items():
            pod = pods.get(uid)
            if pod is not None and not pod.holds_resources:
                self.cluster.report_pending(pod, why.reason, why.message)
        self.last_reasons = session.reasons
        self.cluster.publish_status(queue_statuses(session), podgroup_statuses(session))
        self._warn(session)

    def _warn(self, session: Session) -> None:
        """Warn about objects that are used, but not as their author meant; each warning once."""
        now: dict[WarningKey, str] = {}
        for name, message in session.tree.problems.items():
            now[("Queue", None, name, "QueueMisconfigured")] = (
                f"{message}; it is scheduled as a top-level queue"
            )
        for job in session.pending_jobs:
            if job.is_gang and not job.explicit_group:
                message = (
                    f"PodGroup {job.key} does not exist: the {len(job.running) + len(job.pending)} pods naming it "
                    "are scheduled as one gang of those present; create the PodGroup (minMember) or remove "
                    "the annotation"
                )
                for pod in job.pending:
                    now[("Pod", pod.namespace, pod.name, "PodGroupNotFound")] = message
        for node in self.cache.state.nodes:
            if node is not None and node.warning:
                now[("Node", None, node.name, "GPUMemoryAssumed")] = node.warning
        for key, message in now.items():
            if self.warnings.get(key) != message:
                self.cluster.warn(*key, message)
        self.warnings = now


def queue_statuses(session: Session) -> dict[str, QueueStatus]:
    return {
        name: QueueStatus.from_internal(
            allocated=node.allocated.as_dict(),
            requested=node.requested.as_dict(),
            fair_share=node.fair_share.as_dict(),
        )
        for name, node in session.tree.nodes.items()
    }


def podgroup_statuses(session: Session) -> dict[str, PodGroupStatus]:
    out: dict[str, PodGroupStatus] = {}
    for job in session.jobs:
        if not job.is_gang:
            continue
        running = sum(1 for p in (*job.running, *job.pending) if p.holds_resources)
        if running >= job.min_member:
            out[job.key] = PodGroupStatus(phase="Running", running=running)
            continue
        why = next((session.reasons[p.uid] for p in job.pending if p.uid in session.reasons), None)
        why = why or session.group_reasons.get(job.key)
        conditions = (
            [Condition(type="Schedulable", status="False", reason=why.reason, message=why.message)]
            if why
            else []
        )
        phase = "Unschedulable" if why else "Pending"
        out[job.key] = PodGroupStatus(phase=phase, running=running, conditions=conditions)
    return out
