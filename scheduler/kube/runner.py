"""Runs the scheduling loop against a Kubernetes API: informers always (warm standby), cycles only while
this replica holds the leader Lease, metrics after every cycle."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from kubernetes import client
from pydantic import ValidationError

from scheduler.api.keys import MILLI_PER_GPU, SCHEDULER_NAME
from scheduler.api.report import GPUNodeReport
from scheduler.cache.handoff import HandoffRule
from scheduler.cycle import CycleResult, Scheduler, SchedulerConfig
from scheduler.framework.metrics import SchedulerMetrics
from scheduler.kube.backoff import Backoff
from scheduler.kube.cluster import KubeCluster
from scheduler.kube.leader import LeaseElector
from scheduler.kube.usage_store import ConfigMapUsageStore
from scheduler.queues.usage_history import TimeBasedFairShare
from scheduler.ui.build import build_view
from scheduler.ui.view import DashboardView

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunnerConfig:
    identity: str = "tessera-scheduler"
    scheduler_name: str = SCHEDULER_NAME
    cycle_interval_s: float = 1.0
    leader_elect: bool = True
    lease_name: str = "tessera-scheduler"
    lease_namespace: str = "tessera-system"
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    event_interval_s: float = 30.0
    watch_timeout_s: int = 300
    sync_timeout_s: float = 60.0
    backoff_initial_s: float = 0.2
    # Cycles run every `cycle_interval_s`, and sooner when a pod of ours waits (or a bind failed), but no
    # sooner than `min_cycle_gap_s` after the last one (None: on the period only), unless the device plugin
    # marked a pod allocated while pods are queued behind it (`_pause`).
    min_cycle_gap_s: float | None = 0.05
    bind_workers: int = 8  # threads carrying out binds (asynchronous binding)
    # Tessera's device plugin serves whole GPUs too (the chart's devicePlugin.wholeGPUResource): whole-GPU
    # pods on its nodes wait for it after their bind, as fractions always do (scheduler/cache/handoff.py).
    whole_gpu_plugin: bool = True
    kai_compat: bool = False  # also read KAI Scheduler's Queue and PodGroup kinds (docs/kai-compat.md)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    # Where time-based fair share keeps the queues' usage history (when `scheduler.usage` is set).
    usage_configmap: str = "tessera-usage-history"
    usage_namespace: str = "tessera-system"


class SchedulerRunner:
    def __init__(
        self,
        api_client: client.ApiClient,
        config: RunnerConfig | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.config = cfg = config or RunnerConfig()
        self.metrics = metrics or SchedulerMetrics()
        self.cluster = KubeCluster(
            api_client,
            identity=cfg.identity,
            scheduler_name=cfg.scheduler_name,
            event_interval_s=cfg.event_interval_s,
            watch_timeout_s=cfg.watch_timeout_s,
            backoff=Backoff(initial_s=cfg.backoff_initial_s),
            bind_workers=cfg.bind_workers,
            kai_compat=cfg.kai_compat,
        )
        self.usage_store = (
            ConfigMapUsageStore(client.CoreV1Api(api_client), cfg.usage_namespace, cfg.usage_configmap)
            if cfg.scheduler.usage is not None
            else None
        )
        # The cycle calls ours the pods that name this scheduler, and knows pods wait for a device plugin here.
        self.scheduler_config = dataclasses.replace(
            cfg.scheduler,
            scheduler_name=cfg.scheduler_name,
            handoff=HandoffRule(whole_gpus=cfg.whole_gpu_plugin),
        )
        self.scheduler = Scheduler(self.cluster, self.scheduler_config, self.usage_store)
        self._leading = False  # whether the last step led (a new term reads the usage history again)
        self.elector = (
            LeaseElector(
                client.CoordinationV1Api(api_client),
                name=cfg.lease_name,
                namespace=cfg.lease_namespace,
                identity=cfg.identity,
                lease_duration_s=cfg.lease_duration_s,
                renew_deadline_s=cfg.renew_deadline_s,
                retry_period_s=cfg.retry_period_s,
            )
            if cfg.leader_elect
            else None
        )
        self.cycles = 0
        self.rebuilds = 0
        self.errors: deque[str] = deque(
            maxlen=100
        )  # why the latest cycles failed (each followed by a rebuild)
        # Held for a whole cycle: readers of the scheduler's state (the dashboard) see one consistent cycle.
        self.cycle_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gauges_at: tuple[object, int] = (None, -1)  # (state, version) the GPU gauges show
        self._releasing_rows: set[int] = set()  # rows whose gauges count pods being deleted (see observe)

    @property
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader.is_set()

    def start(self) -> SchedulerRunner:
        self.cluster.start()
        if not self.cluster.wait_synced(self.config.sync_timeout_s):
            log.warning(
                "watch caches not synced after %.0fs; scheduling starts anyway", self.config.sync_timeout_s
            )
        if self.elector is not None:
            self.elector.start()
        self._thread = threading.Thread(target=self._loop, name="scheduling-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.cluster.wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
        fairshare = self.scheduler.fairshare
        if fairshare is not None and self._leading and self.is_leader:  # what was used since the last save
            fairshare.save(time.time())
        if self.elector is not None:
            self.elector.stop(release=True)
        self.cluster.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:  # one bad cycle must not end scheduling, nor leave a half-applied state
                self.errors.append(f"{type(exc).__name__}: {exc}")
                log.exception(
                    "scheduling cycle failed; rebuilding the scheduler's state from the watch caches"
                )
                self.rebuild()
            self._pause()

    def _pause(self) -> None:
        """Until the next cycle: the cycle period, or less once there is work and the minimum gap passed.
        While pods are queued behind the device plugin (`Transaction.queue_behind`) a mark it writes ends
        the gap at once: the next pod of that node is bound first thing in the cycle (`bind_reserved`), so
        each node's turn costs the round trips, not the gap (a burst of fractions drains node by node)."""
        cfg = self.config
        if cfg.min_cycle_gap_s is None or cfg.min_cycle_gap_s >= cfg.cycle_interval_s:
            self._stop.wait(cfg.cycle_interval_s)
            return
        if self.scheduler.queued_behind_plugin():
            if self.cluster.wait_for_mark(cfg.min_cycle_gap_s) or self._stop.is_set():
                return
        elif self._stop.wait(cfg.min_cycle_gap_s):
            return
        self.cluster.wait_for_work(cfg.cycle_interval_s - cfg.min_cycle_gap_s)

    def rebuild(self) -> None:
        """A fresh scheduler fed with everything the watch caches hold (a cycle that failed half-way may
        have left its state inconsistent; the caches are the truth)."""
        with self.cycle_lock:
            kept = self.scheduler.fairshare  # the usage history is not the cluster's picture: it stays
            self.scheduler = Scheduler(self.cluster, self.scheduler_config, self.usage_store)
            if kept is not None:
                self.scheduler.fairshare = kept
            self.cluster.replay()
            self.rebuilds += 1

    def view(self) -> DashboardView:
        """The dashboard's view of the current scheduler (one consistent cycle)."""
        with self.cycle_lock:
            return build_view(self.scheduler, self.reports(), title="Tessera cluster")

    def step(self) -> CycleResult | None:
        """One cycle when leading; a standby only keeps its cache current."""
        leading = self.is_leader
        with self.cycle_lock:
            self.cluster.writable = leading
            fairshare = self.scheduler.fairshare
            if leading and not self._leading and fairshare is not None and fairshare.loaded:
                # A new term: another leader may have written the usage history meanwhile; read it again.
                self.scheduler.fairshare = TimeBasedFairShare(fairshare.params, fairshare.store)
            self._leading = leading
            if not leading:
                self.scheduler.cache.apply(self.cluster.drain_events())
                return None
            result = self.scheduler.run_cycle()
            self.cycles += 1
            self.observe(result)
        return result

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.cluster.informers.values())

    def reports(self) -> list[GPUNodeReport]:
        """The GPUNodeReports in the watch cache (for the dashboard); malformed ones are skipped."""
        out = []
        for obj in self.cluster.informers["GPUNodeReport"].snapshot():
            try:
                out.append(GPUNodeReport.model_validate(obj))
            except ValidationError:
                continue
        return out

    def observe(self, result: CycleResult) -> None:
        m = self.metrics
        m.cycle_seconds.observe(result.duration_s)
        for action, seconds in result.action_s.items():
            m.action_seconds.labels(action).observe(seconds)
        for event in result.events:
            if event.get("type") == "Scheduled":
                m.scheduled.labels(event.get("action", "")).inc()
            elif event.get("type") == "Evicted":
                m.evicted.labels(event.get("action", "")).inc()
        m.set_pending(Counter(r.reason for r in result.reasons.values()))
        session = self.scheduler.last_session
        if session is not None:
            for name, node in session.tree.nodes.items():
                for resource in ("gpu", "cpu", "memory"):
                    m.set_queue(
                        name,
                        resource,
                        fair_share=node.fair_share.get(resource),
                        allocated=node.allocated.get(resource),
                        quota=node.resource(resource).quota,
                    )
        # Per-GPU gauges of the nodes that changed since the last cycle only (all of them after a rebuild):
        # setting thousands of labelled gauges after every cycle cost more than the cycle.
        state = self.scheduler.cache.state
        seen_state, seen_version = self._gauges_at
        rows = state.changed_rows(seen_version) if seen_state is state else None
        self._gauges_at = (state, state.version)
        # A pod being deleted has left the plan (its share is free in the arrays, for pipelining) but is
        # still on its GPU until it is gone: the gauge says what is on the GPU, so it counts it. Its rows
        # are set again while it is there and once after (its end changes no array, so no row version).
        releasing: dict[int, Counter[int]] = {}
        for held in self.scheduler.cache.ledger.releasing.values():
            on_row = releasing.setdefault(held.placement.node, Counter())
            for share in held.placement.gpus:
                on_row[share.slot] += share.milli
        if rows is not None:
            rows = sorted({*rows, *releasing, *self._releasing_rows})
        self._releasing_rows = set(releasing)
        for row in range(len(state.nodes)) if rows is None else rows:
            node_info = state.nodes[row] if row < len(state.nodes) else None
            if node_info is None:
                continue
            leaving = releasing.get(row, Counter())
            for gpu in range(node_info.gpu_count):
                used = 1 - (int(state.free_milli[row, gpu]) - leaving[gpu]) / MILLI_PER_GPU
                m.gpu_allocated.labels(node_info.name, str(gpu)).set(min(used, 1.0))
