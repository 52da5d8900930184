"""The scheduling loop: apply watch events, open a session, run the actions, report what is pending.

Every step is contained per object (`scheduler/cache/containment.py` says where the boundaries are and why):
a failure while the session opens or an action runs quarantines the job it was handling and the step goes
on without it; reporting one pod, queue or pod group never keeps the others from being reported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.actions import DEFAULT_ACTIONS, Action, make_actions
from scheduler.api.keys import SCHEDULER_NAME
from scheduler.api.meta import Condition
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.cache.cache import Cache
from scheduler.cache.cluster import Cluster
from scheduler.cache.containment import MAX_CULPRITS, RETRIED, culprit, failure
from scheduler.cache.handoff import HandoffRule
from scheduler.cache.inflight import Deferred
from scheduler.framework.budget import Budget, BudgetLimits
from scheduler.framework.eviction import EvictionPolicy
from scheduler.framework.memo import Memo
from scheduler.framework.session import Session, cluster_capacity
from scheduler.model.jobs import Job
from scheduler.model.reasons import PendingReason, Reason
from scheduler.model.types import PodInfo
from scheduler.placement.incremental import IncrementalPlacer
from scheduler.placement.live_workload import WorkloadLearner
from scheduler.placement.registry import DEFAULT_POLICY, make_policy
from scheduler.placement.workload import TypicalWorkload
from scheduler.queues.usage_history import TimeBasedFairShare, UsageParams
from scheduler.queues.usage_store import MemoryUsageStore, UsageStore
from scheduler.state.backend import get_namespace
from scheduler.state.bulk import arrays_agree

log = logging.getLogger(__name__)
WarningKey = tuple[str, str | None, str, str]


@dataclass(frozen=True)
class SchedulerConfig:
    policy: str = DEFAULT_POLICY
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    backend: str | None = None  # None: TESSERA_ARRAY_BACKEND / auto
    max_gpus_per_node: int = 8
    expected_nodes: int = 64
    # Search budgets count work, so a simulation decides the same on any machine; the live scheduler
    # passes `BudgetLimits.live()` (a wall-clock cap on top).
    budget: BudgetLimits = field(default_factory=BudgetLimits)
    usage: UsageParams | None = None  # time-based fair share (docs/fairshare.md); None: off
    scheduler_name: str = SCHEDULER_NAME  # what this scheduler's pods name in spec.schedulerName
    # Which pods wait for a device plugin's Allocate after their bind (scheduler/cache/handoff.py); None: no
    # device plugin (a simulation).
    handoff: HandoffRule | None = None
    # Victims' grace period cap and what a refusing disruption budget means (framework/eviction.py).
    eviction: EvictionPolicy = field(default_factory=EvictionPolicy)


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
            self.xp,
            max_gpus=self.config.max_gpus_per_node,
            capacity=self.config.expected_nodes,
            scheduler_name=self.config.scheduler_name,
            handoff=self.config.handoff,
        )
        self.policy = make_policy(self.config.policy)
        # A policy that measures fragmentation learns its typical workload from the pods in the cache.
        caps = self.policy.capabilities
        self.learner = WorkloadLearner(caps.workload_coverage) if caps.typical_workload else None
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
        self._contained_failures: list[Exception] = []  # in actions, this cycle
        # Queues' recent usage, kept in `usage_store` (a ConfigMap in Kubernetes) across restarts.
        params = self.config.usage
        self.fairshare = TimeBasedFairShare(params, usage_store or MemoryUsageStore()) if params else None

    def queued_behind_plugin(self) -> bool:
        """Whether pods are queued behind the device plugin (`Transaction.queue_behind`): a mark it writes
        lets one be bound."""
        return any(res.handoff for res in self.cache.ledger.reservations().values())

    def fix_workload(self, workload: TypicalWorkload) -> None:
        """Hand the policy a known typical workload (a benchmark's): kept as given, never relearned."""
        self.learner = None
        self.policy.set_typical_workload(workload)

    def run_cycle(self) -> CycleResult:
        t0 = time.perf_counter()
        now = self.cluster.now()
        self._contained_failures = []
        self.cache.apply(self.cluster.drain_events())
        if self.learner is not None:
            learned = self.learner.observe(self.cache.pods, self.cache.state)
            if learned is not None:
                self.policy.set_typical_workload(learned)
        # Binds that were in flight: confirmed, or forgotten (a gang undone whole) before the session opens.
        settled = Deferred()
        self.cache.inflight.settle(self.cluster.bind_outcomes(), self.cache, self.cluster, settled)
        epoch = self.cluster.epoch_s()
        session = self._open(now, epoch)
        settled.replay(session)
        session.add_time("state_update", time.perf_counter() - t0)
        timings: dict[str, float] = {}
        try:
            for action in self.actions:
                ta = time.perf_counter()
                self._execute(action, session)
                timings[action.name] = time.perf_counter() - ta
        finally:
            if self.cache.ledger.abort() is not None:  # an action failed inside a transaction: no half of it
                log.error("a transaction was left open by a failing action; rolled back")
            session.close()
        if self.fairshare is not None:  # what the queues hold from now on, until the next cycle
            allocated = {name: node.allocated for name, node in session.tree.nodes.items()}
            self.fairshare.observe(epoch, allocated, cluster_capacity(self.cache.state))
        reports = self._report(session)
        self.last_session = session
        if self._contained_failures and not self._state_agrees():
            # The failure wrote the arrays outside the ledger (nothing rolls that back): fail the cycle, so
            # that its caller rebuilds the state from the cluster (the Kubernetes runner does).
            raise self._contained_failures[0]
        bound = sum(1 for e in session.events if e["type"] == "Scheduled")
        evicted = sum(1 for e in session.events if e["type"] == "Evicted")
        duration = time.perf_counter() - t0
        phases = dict(session.timings)
        phases["other"] = max(0.0, duration - sum(phases.values()))
        return CycleResult(
            started_s=now, duration_s=duration, action_s=timings, bound=bound, evicted=evicted,
            pending=len(session.verdicts), reasons=reports, events=session.events, phase_s=phases,
            retry_at_epoch_s=session.retry_at,
        )  # fmt: skip

    # ------------------------------------------------------------------------------------ containment
    def _open(self, now: float, epoch: float) -> Session:
        """Open the session; a job that makes it fail is quarantined and the session opened without it."""
        index = self.cache.index
        for _ in range(MAX_CULPRITS):
            try:
                session = self._session(now, epoch)
                break
            except Exception as exc:
                key = culprit(exc)
                if key is None or not index.quarantine(key, self._failed_on(exc, key, "opening the session")):
                    raise
        else:
            session = self._session(now, epoch)
        for pod, message in index.quarantined_pods():
            session.set_reason(pod, Reason.INVALID_REQUEST, message)
        return session

    def _session(self, now: float, epoch: float) -> Session:
        usage = self.fairshare.shares(epoch) if self.fairshare is not None else None
        k_value = self.fairshare.params.k_value if self.fairshare is not None else 1.0
        return Session.open(
            self.cache, self.placer, now, self.budget, probe=self.probe, epoch_s=epoch, recent_usage=usage,
            k_value=k_value, eviction=self.config.eviction,
        )  # fmt: skip

    def _execute(self, action: Action, session: Session) -> None:
        """Run one action; when it fails on a job, that job is rolled back, quarantined, and the action run
        again for the others (at most MAX_CULPRITS times a cycle, then it is skipped until the next)."""
        for attempt in range(MAX_CULPRITS + 1):
            try:
                action.execute(session, self.cluster)
                return
            except Exception as exc:
                _roll_back(session)
                self._contained_failures.append(exc)
                key = culprit(exc)
                message = self._failed_on(exc, key, action.name)
                if key is None or attempt == MAX_CULPRITS or not self.cache.index.quarantine(key, message):
                    self.cache.error_log.add(f"action {action.name} skipped this cycle: {failure(exc)}")
                    return
                _leave_out(session, key, message)

    def _state_agrees(self) -> bool:
        ledger = self.cache.ledger
        holdings = [h.placement for h in (*ledger.pods.values(), *ledger.reserved.values())]
        return arrays_agree(ledger.state, holdings)

    def _failed_on(self, exc: Exception, key: str | None, step: str) -> str:
        log.exception("%s failed on job %s", step, key)
        message = f"the scheduler failed on this pod's job in {step} ({failure(exc)}); {RETRIED}"
        self.cache.error_log.add(f"job {key}: {message}")
        return message

    def _report(self, session: Session) -> dict[str, PendingReason]:
        """Tell people why pods wait, and every queue's and pod group's status: each object on its own.
        The verdicts become messages here; they are returned, by pod uid."""
        pods = self.cache.pods
        reports = session.verdicts.reports()
        for uid, why in reports.items():
            pod = pods.get(uid)
            if pod is not None and not self.cache.ledger.on_node(pod):
                self._contained(self.cluster.report_pending, pod, why.reason, self._why(pod, why))
        self.last_reasons = reports
        self._contained(self.cluster.publish_status, queue_statuses(session), podgroup_statuses(session))
        self._contained(self._warn, session)
        return reports

    def _why(self, pod: PodInfo, why: PendingReason) -> str:
        """An invalid queue says what is wrong with it (it is not merely missing)."""
        if why.reason is Reason.INVALID_QUEUE:
            problem = self.cache.mirror.problems.queues.get(pod.queue)
            if problem is not None:
                return f"{problem}; fix the queue or label the pod with another leaf queue"
        return why.message

    def _contained(self, report: Callable[..., Any], *args: Any) -> Any:
        """One report: a failure is logged and recorded, and the others are still made."""
        try:
            return report(*args)
        except Exception as exc:
            log.exception("reporting with %s failed", getattr(report, "__name__", report))
            self.cache.error_log.add(f"reporting: {failure(exc)}")
            return None

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
                    f"PodGroup {job.key} does not exist: the {len(job.members)} pods naming it "
                    "are scheduled as one gang of those present; create the PodGroup (minMember) or remove "
                    "the annotation"
                )
                for pod in session.facts(job).pending:
                    now[("Pod", pod.namespace, pod.name, "PodGroupNotFound")] = message
        for node in self.cache.state.nodes:
            if node is not None and node.warning:
                now[("Node", None, node.name, "GPUMemoryAssumed")] = node.warning
        for name, message in self.cache.mirror.gpu_identities.unknown_memory.items():
            now[("Node", None, name, "GPUMemoryUnknown")] = message  # gone once its GPUNodeReport came
        problems = self.cache.mirror.problems
        for name, message in problems.nodes.items():
            now[("Node", None, name, "NodeUnusable")] = message
        for name, message in (*problems.queues.items(), *session.tree.invalid.items()):
            now[("Queue", None, name, "QueueInvalid")] = message
        for group, message in problems.podgroups.items():
            namespace, _, name = group.partition("/")
            now[("PodGroup", namespace, name, "PodGroupInvalid")] = message
        for key, message in now.items():
            if self.warnings.get(key) != message:
                self._contained(self.cluster.warn, *key, message)
        self.warnings = now


def _roll_back(session: Session) -> None:
    """Undo what the failing action's open transaction did, except the binds it made: those pods are bound
    in the cluster (their assignment says where), so they keep their places (`Ledger.abort`). A place that
    cannot be taken back masks its node for GPU pods until the watch brings the bind (accounted from its
    assignment)."""
    lost = session.ledger.abort()
    if lost is None:
        return
    log.error("a transaction was left open by a failing action; rolled back")
    for held in lost:
        session.mask_node(held.placement.node)


def _leave_out(session: Session, key: str, message: str) -> None:
    """Take quarantined job `key` out of the session and tell its pending pods why. (Pods of the other jobs
    bound before the failure hold their places in the ledger: the action, run again, sees them running.)"""
    for job in session.jobs:
        if job.key == key:
            for p in session.facts(job).unplaced:
                session.set_reason(p, Reason.INVALID_REQUEST, message)
    session.jobs = [job for job in session.jobs if job.key != key]
    session.pending_jobs = [job for job in session.pending_jobs if job.key != key]
    session.memo = Memo()  # victims and capacities computed with the job in


def queue_statuses(session: Session) -> dict[str, QueueStatus]:
    out: dict[str, QueueStatus] = {}
    for name, node in session.tree.nodes.items():
        try:
            out[name] = QueueStatus.from_internal(
                allocated=node.allocated.as_dict(),
                requested=node.requested.as_dict(),
                fair_share=node.fair_share.as_dict(),
            )
        except Exception:  # one queue: the others are still written
            log.exception("status of queue %s failed", name)
    return out


def podgroup_statuses(session: Session) -> dict[str, PodGroupStatus]:
    out: dict[str, PodGroupStatus] = {}
    for job in session.jobs:
        if not job.is_gang:
            continue
        try:
            out[job.key] = _podgroup_status(session, job)
        except Exception:  # one pod group: the others are still written
            log.exception("status of pod group %s failed", job.key)
    return out


def _podgroup_status(session: Session, job: Job) -> PodGroupStatus:
    running = sum(1 for p in job.members if session.ledger.on_node(p))
    if running >= job.min_member:
        return PodGroupStatus(phase="Running", running=running)
    pending = session.facts(job).pending
    verdict = next((v for p in pending if (v := session.verdicts.get(p.uid)) is not None), None)
    why = verdict.report() if verdict is not None else session.group_reasons.get(job.key)
    conditions = (
        [Condition(type="Schedulable", status="False", reason=why.reason, message=why.message)] if why else []
    )
    phase = "Unschedulable" if why else "Pending"
    return PodGroupStatus(phase=phase, running=running, conditions=conditions)
