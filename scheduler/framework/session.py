"""One scheduling cycle's working set: the cache, the queue tree with fair shares, jobs, reasons, events.

While it is open the session listens to the ledger: every holding that comes or goes (a placement, an
eviction, a reservation, or the undo of one) moves its queue's and its ancestors' `allocated` figures, so
the queue rules the actions check always see the cycle's changes so far.

The actions place through the session (`place`, `place_one`, `feasible`), which leaves out the nodes a GPU
pod may not use now without writing anything into the cluster state: a node where a pod bound by us waits
for the device plugin's Allocate takes no other pod the plugin must recognise (`scheduler/cache/handoff.py`:
the next goes to the best other node, or queues behind that pod where every other place would start an
unused GPU: `fill_first`), and a node whose place could not be taken back after a failed action takes no
GPU pod for the rest of the cycle.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.cache.cache import Cache
from scheduler.cache.ledger import Holding, HoldKind, Ledger, same_charge
from scheduler.cache.reservations import match_reservations
from scheduler.framework.budget import Budget
from scheduler.framework.eviction import EvictionPolicy
from scheduler.framework.memo import Memo
from scheduler.framework.verdicts import Verdicts
from scheduler.model.jobs import Job, JobFacts, job_facts
from scheduler.model.reasons import PendingReason, Reason
from scheduler.model.resources import Resources, placement_usage
from scheduler.model.types import Placement, PodInfo
from scheduler.placement.explain import explain_unschedulable
from scheduler.placement.filters import feasible
from scheduler.placement.incremental import IncrementalPlacer, Prefer
from scheduler.placement.placer import place_one, placement_at
from scheduler.placement.policy import Array, PlacementPolicy
from scheduler.queues import QueueTree, compute_fair_shares
from scheduler.queues.charge import GPUCharge
from scheduler.state.backend import ArrayNamespace
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand


class TreeUsage:
    """Ledger listener: a holding's usage moves its owner queue's (and ancestors') allocated figures.
    A releasing pod counts for nobody: its queue gave it up when it was evicted."""

    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree

    def changed(self, old: Holding | None, new: Holding | None) -> None:
        if same_charge(old, new):
            return
        for h, sign in ((old, -1), (new, +1)):
            if h is None or h.owner is None or h.owner.queue not in self.tree.nodes:
                continue  # pods of other schedulers take capacity but belong to no queue
            if h.kind is HoldKind.RELEASING:
                continue
            usage = placement_usage(h.placement)
            delta = usage if sign > 0 else Resources() - usage
            for node in self.tree.ancestors(h.owner.queue):
                node.allocated = node.allocated + delta
                if h.owner.nonpreemptible:
                    node.allocated_np = node.allocated_np + delta

    def arrived(self, holdings: list[Holding]) -> None:
        for h in holdings:
            if h.owner is not None:  # the others belong to no queue
                self.changed(None, h)


@dataclass
class Session:
    cache: Cache
    placer: IncrementalPlacer
    now: float
    tree: QueueTree
    jobs: list[Job]
    budget: Budget = field(default_factory=Budget)  # how much the actions may search (work, not seconds)
    eviction: EvictionPolicy = field(default_factory=EvictionPolicy)  # victims' grace period, budgets
    # A cheap, row-local placer with which victim searches try their plans (None: the session's own);
    # the plan applied is placed by the session's policy.
    probe: IncrementalPlacer | None = None
    charge: GPUCharge | None = None  # what a pending pod counts for its queue (set by `open`)
    pending_jobs: list[Job] = field(default_factory=list)  # those of `jobs` with members to place at open
    # Why each pod left waiting waits, as the actions found it (typed; made into messages at report time).
    verdicts: Verdicts = field(default_factory=Verdicts)
    events: list[dict[str, Any]] = field(default_factory=list)
    # Seconds spent per phase ("scoring", "commit"...), summed by the actions for the cycle's report.
    timings: dict[str, float] = field(default_factory=dict)
    reserved: dict[str, str] = field(default_factory=dict)  # pending pod uid -> reservation it takes
    # Pods with a place reserved that are not bound yet (pipelined): no action places them again.
    pipelined: set[str] = field(default_factory=set)
    memo: Memo = field(default_factory=Memo)  # per-cycle results the actions share (typed keys)
    # job key -> (the job, the ledger's change count, how many pods were pipelined, its facts): `facts`
    _facts: dict[str, tuple[Job, int, int, JobFacts]] = field(default_factory=dict, repr=False)
    group_reasons: dict[str, PendingReason] = field(default_factory=dict)  # gangs with no pending pod
    unavailable: set[int] = field(
        default_factory=set
    )  # rows whose GPUs take no pod for the rest of the cycle
    # Now as Unix time (the clock pods' start times are read against: simulated in a simulation).
    epoch_s: float = 0.0
    # The earliest Unix time something waiting now may be decided otherwise without any event (a victim's
    # minimum runtime ends): a simulation advances its clock to it; None: nothing of the kind.
    retry_at: float | None = None
    _exclude: Array | None = field(default=None, repr=False)  # bool[C] of `unavailable`
    _usage: TreeUsage | None = field(default=None, repr=False)

    @property
    def ledger(self) -> Ledger:
        return self.cache.ledger

    @property
    def state(self) -> ClusterState:
        return self.cache.ledger.state

    @property
    def policy(self) -> PlacementPolicy:
        return self.placer.policy

    @property
    def xp(self) -> ArrayNamespace:
        return self.cache.xp

    def request(self, pod: PodInfo) -> Resources:
        """What a pending pod counts for its queue (a gpu-memory pod: its largest possible share)."""
        if self.charge is None:
            self.charge = GPUCharge(self.state)
        return self.charge(pod)

    def request_of(self, pods: list[PodInfo]) -> Resources:
        total = Resources()
        for p in pods:
            total = total + self.request(p)
        return total

    @classmethod
    def open(
        cls,
        cache: Cache,
        placer: IncrementalPlacer,
        now: float,
        budget: Budget | None = None,
        *,
        probe: IncrementalPlacer | None = None,
        epoch_s: float | None = None,
        recent_usage: Mapping[str, Resources] | None = None,
        k_value: float = 1.0,
        eviction: EvictionPolicy | None = None,
    ) -> Session:
        """`recent_usage`: queues' recent usage, for time-based fair share (None: off; see
        queues/fairshare.py)."""
        tree = QueueTree(cache.queues.values())
        charge = GPUCharge(cache.state)
        jobs = cache.index.jobs()  # kept across cycles; only changed jobs and those with pending pods rebuilt
        # Usage per queue is kept by the job index as integer sums (GPU milli, CPU milli, MiB), updated as
        # holdings change: one Resources per queue here, not one per running pod.
        usage = cache.index.usage
        allocated = {
            q: _resources(u)
            for q, u in usage.by_queue().items()
            if q in tree.nodes  # pods of other schedulers take capacity but belong to no queue
        }
        allocated_np = {
            q: _resources(u) for q, u in usage.by_queue(nonpreemptible=True).items() if q in tree.nodes
        }
        reservations = cache.ledger.reservations()
        for res in reservations.values():  # a moving pod keeps counting where it is going
            if res.queue in tree.nodes:
                allocated[res.queue] = allocated.get(res.queue, Resources()) + placement_usage(res.placement)
        pending = cache.index.pending_jobs()  # jobs without pending pods request nothing more
        unplaced = [job_facts(job, cache.ledger).unplaced for job in pending]
        reserved = match_reservations(reservations, (p for pods in unplaced for p in pods))
        requested: dict[str, Resources] = {}
        for job, pods in zip(pending, unplaced, strict=True):
            if job.queue not in tree.nodes:
                continue
            req = Resources()
            for p in pods:
                req = req + charge(p)
            for p in pods:
                if p.uid in reserved:  # already counted through its reservation
                    req = req - charge(p)
            requested[job.queue] = requested.get(job.queue, Resources()) + req
        for q, a in allocated.items():
            requested[q] = requested.get(q, Resources()) + a
        tree.roll_up(allocated, requested, allocated_np)
        compute_fair_shares(tree, cluster_capacity(cache.state), recent_usage, k_value)
        session = cls(
            cache=cache, placer=placer, now=now, tree=tree, jobs=jobs, budget=budget or Budget(), probe=probe,
            charge=charge,
            pending_jobs=pending, reserved=reserved, epoch_s=now if epoch_s is None else epoch_s,
            eviction=eviction or EvictionPolicy(),
        )  # fmt: skip
        session._usage = TreeUsage(tree)
        cache.ledger.add_listener(session._usage)
        return session

    def facts(self, job: Job) -> JobFacts:
        """Where `job`'s members are now: running (the ledger holds their places), pipelined, or still to
        place (`model.jobs.job_facts`, the one rule; actions place and evict, the facts follow)."""
        # Kept while nothing they read changed (the holdings, the pipelined pods: pipelined only grows in a
        # session): the actions ask it for every pending job, several times a cycle.
        ledger = self.cache.ledger
        found = self._facts.get(job.key)
        key = (ledger.changes, len(self.pipelined))
        if found is not None and found[0] is job and found[1:3] == key:
            return found[3]
        facts = job_facts(job, ledger, self.pipelined)
        self._facts[job.key] = (job, *key, facts)
        return facts

    def retry_by(self, epoch_s: float) -> None:
        """Ask for a cycle by `epoch_s` at the latest (see `retry_at`)."""
        if self.retry_at is None or epoch_s < self.retry_at:
            self.retry_at = epoch_s

    def close(self) -> None:
        """Stop following the ledger (the cycle is over; the session stays readable)."""
        if self._usage is not None:
            self.cache.ledger.remove_listener(self._usage)
            self._usage = None

    # ------------------------------------------------------------------------------------ placement
    def mask_node(self, row: int) -> None:
        """The node's GPUs take no pod for the rest of the cycle: no GPU pod goes there."""
        if row not in self.unavailable:
            self.unavailable.add(row)
            self._exclude = None

    def _waits_for_plugin(self, d: PodDemand) -> bool:
        """Whether `d`, once bound, would wait for the device plugin's Allocate (so it must not join a node
        where a pod already does: `scheduler/cache/handoff.py`)."""
        rule = self.cache.handoff.rule
        return rule is not None and d.uses_gpu and (not d.whole or rule.whole_gpus)

    def handoff_rows(self, d: PodDemand) -> dict[int, str]:
        """Rows `d` must not join now because a pod bound by us waits there for the device plugin, with a
        pod waiting there (uid each). Empty when `d` needs no device plugin."""
        if not self._waits_for_plugin(d) or not self.cache.handoff.waiting:
            return {}
        return self.cache.handoff.rows()

    def excluded(self, d: PodDemand, *, handoff: bool = True) -> Array | None:
        """bool[C]: rows `d` may not use now (None when there are none): nodes whose GPUs are busy this
        cycle, nodes where a pod bound by us waits for the device plugin when `d` would too
        (`cache/handoff.py`; `handoff=False`: those are not left out), and nodes the pod's inter-pod rules
        refuse with the pods placed so far (affinity, anti-affinity, existing pods' anti-affinity, topology
        spread: `cache/pod_topology.py`)."""
        interpod = self.cache.pod_mask(d)
        locked = self._locked(d, handoff)
        if interpod is None:
            return locked
        return ~interpod if locked is None else locked | ~interpod

    def _locked(self, d: PodDemand, handoff: bool = True) -> Array | None:
        """bool[C]: the rows whose GPUs `d` may not use now (None: none)."""
        if not d.uses_gpu:
            return None
        waiting = self.cache.handoff.mask() if handoff and self._waits_for_plugin(d) else None
        if not self.unavailable:
            return waiting
        masked = self._masked()
        return masked if waiting is None else masked | waiting

    def _masked(self) -> Array:
        """bool[C]: the rows `mask_node` took out for this cycle."""
        if self._exclude is None or self._exclude.shape[0] != self.state.capacity:
            xp = self.xp
            mask = xp.zeros((self.state.capacity,), dtype=xp.bool)
            for row in sorted(self.unavailable):
                mask[row] = True
            self._exclude = mask
        return self._exclude

    def fill_first(self, d: PodDemand, pl: Placement | None) -> tuple[Placement, bool] | None:
        """A better place for a single fraction than `pl` (the policy's best on nodes where no pod waits for
        the device plugin; None: there is none) when `pl` would start an unused GPU: a GPU already in use
        that it fits, and whether that place is behind the plugin (on a node where a pod waits: the pod
        queues there, `Transaction.queue_behind`). None: `pl` it is.

        The rule (DESIGN.md step 3 says the next pod goes to the best other node rather than waiting behind
        one a node waits for; waiting is right only where every other choice is worse for the policy): a
        policy that fills GPUs in use before it starts one (`Capabilities.fills_gpus`) never starts one
        while a GPU in use can take the pod, wherever that GPU is. The nodes' turns come in the order the
        plugin's marks arrive, so without this a burst spread one pod per node would leave GPUs part-used
        (each mark lets one node take its next pod, which starts a GPU while others wait half-used); with
        it at most one GPU of a shape is part-used at a time, and a burst ends packed as the policy packs
        it, whatever the order of the marks. Every pod that starts a GPU still goes to the best node where
        none waits. One GPU per pod only (a pod over several GPUs goes to `pl`)."""
        if d.whole or d.num_gpus != 1 or d.gpu_milli <= 0 or not self._waits_for_plugin(d):
            return None
        if not self.policy.capabilities.fills_gpus or (pl is not None and self.shares(pl)):
            return None
        s, xp = self.state, self.xp
        rows, fit = feasible(s, d)
        exclude = self.excluded(d, handoff=False)
        if exclude is not None:
            rows = rows & ~exclude
        in_use = fit & (s.free_milli < MILLI_PER_GPU) & rows[:, None]
        candidates = xp.any(in_use, axis=1)
        if not bool(xp.any(candidates)):
            return None
        got = self.placer.place(d, exclude=~candidates, prefer=self._preference(d))
        if got is None:
            return None
        if not self.shares(got):  # the policy's node, on a GPU in use there (the fullest that fits)
            row = s.free_milli[got.node]
            free = xp.where(in_use[got.node], row, xp.full_like(row, MILLI_PER_GPU + 1))
            got = placement_at(s, got.node, [int(xp.argmin(free))], d)
        waiting = self.cache.handoff.mask()
        return got, waiting is not None and bool(waiting[got.node])

    def shares(self, pl: Placement) -> bool:
        """Whether `pl` takes only GPUs already in use (it starts none)."""
        free = self.state.free_milli
        return all(int(free[pl.node, g.slot]) < MILLI_PER_GPU for g in pl.gpus)

    def why_unplaced(self, d: PodDemand) -> tuple[Reason, str]:
        """Why `d` fits nowhere it may go now: the nodes it fits all wait for the device plugin (it is placed
        once one has allocated its pod), or what the cluster lacks."""
        waiting = self.handoff_rows(d)
        if waiting:
            mask, _ = feasible(self.state, d)
            rows = [r for r in sorted(waiting) if bool(mask[r])]
            if rows:
                names = []
                for r in rows[:3]:
                    pod = self.cache.pods.get(waiting[r])
                    names.append(f"{self.state.node_names[r]} ({pod.key if pod else 'a pod'})")
                where = ", ".join(names) + (f" and {len(rows) - 3} more" if len(rows) > 3 else "")
                return Reason.WAITING_FOR_DEVICE_PLUGIN, (
                    f"{d.describe()} fits only on nodes where the device plugin has yet to allocate the pod bound "
                    f"there before it: {where}; placed once it has (one such pod per node)"
                )
        return Reason.UNSCHEDULABLE, explain_unschedulable(self.state, d, self.cache.pod_rules(d))

    def place(self, d: PodDemand, within: Array | None = None) -> Placement | None:
        """Where `d` goes now, through the incremental placer (the cluster only fills up in `allocate`).
        `within`: bool[C] the rows it may use (a topology domain), None: any."""
        return self.placer.place(d, exclude=self._outside(d, within), prefer=self._preference(d))

    def _preference(self, d: PodDemand) -> Prefer | None:
        """The pod's preferences (kube-scheduler's default scores), for the placer to blend in."""
        topology = self.cache.pod_topology
        return lambda mask: topology.preference(d, mask)

    def probe_place(self, d: PodDemand, within: Array | None = None) -> Placement | None:
        """Where `d` could go now, by the cheap row-local placer victim searches try their plans with."""
        return (self.probe or self.placer).place(d, exclude=self._outside(d, within))

    def place_one(self, d: PodDemand, within: Array | None = None) -> Placement | None:
        """Where `d` goes now, scored afresh (for plans tried and rolled back by the thousand)."""
        return place_one(self.state, self.policy, d, exclude=self._outside(d, within))

    def _outside(self, d: PodDemand, within: Array | None) -> Array | None:
        exclude = self.excluded(d)
        if within is None:
            return exclude
        return ~within if exclude is None else exclude | ~within

    def place_on(self, d: PodDemand, row: int) -> Placement | None:
        """Where on node `row` `d` goes now (the policy picks its GPUs there); None if it does not fit.
        Only that row is checked (victim searches ask this for each plan they try)."""
        s, xp = self.state, self.xp
        exclude = self.excluded(d)
        view = s.take_rows([row])
        mask, fit = feasible(view, d)
        if not bool(mask[0]) or (exclude is not None and bool(exclude[row])):
            return None
        if not d.uses_gpu:
            slots: list[int] = []
        elif self.policy.capabilities.row_local:
            slots = self.policy.pick_gpus(view, 0, d, fit)
        else:  # the policy reads the whole state; its GPU choice looks at `fit[row]` only
            full = xp.zeros(s.present.shape, dtype=xp.bool)
            full[row, :] = fit[0, :]
            slots = self.policy.pick_gpus(s, row, d, full)
        return placement_at(s, row, slots, d)

    def feasible(self, d: PodDemand) -> tuple[Array, Array]:
        """(bool[N] nodes `d` fits now, bool[N, G] GPUs it fits), masked nodes left out."""
        mask, fit = feasible(self.state, d)
        exclude = self.excluded(d)
        return (mask if exclude is None else mask & ~exclude), fit

    # -------------------------------------------------------------------------------------- reports
    def add_time(self, phase: str, seconds: float) -> None:
        self.timings[phase] = self.timings.get(phase, 0.0) + seconds

    def set_reason(self, pod: PodInfo, reason: Reason, message: str) -> None:
        """`pod` waits for `reason`, as `message` says (a fresh verdict: see `verdicts` to add to one)."""
        self.verdicts.tell(pod, reason, message)

    @property
    def reasons(self) -> dict[str, PendingReason]:
        """Why each pod waits, as people read it (the verdicts' messages, made now), by pod uid."""
        return self.verdicts.reports()

    def event(self, type_: str, action: str, pod: PodInfo, message: str = "", **extra: Any) -> None:
        self.events.append(
            {
                "time_s": round(self.now, 3),
                "type": type_,
                "action": action,
                "pod": pod.key,
                "message": message,
            }
            | extra
        )
        if decisions.isEnabledFor(logging.INFO):
            decisions.info("%s", decision_line(type_, action, pod, message, extra))


# Every bind, eviction and pipelined placement, one structured line each at INFO (the scheduler's log):
# `decision=Scheduled action=allocate pod=ns/p queue=team-a job=ns/g node=gpu-1 gpus=0:500 message="..."`.
decisions = logging.getLogger("scheduler.decisions")


def _logfmt(value: Any) -> str:
    if isinstance(value, list):
        value = ",".join(
            f"{v.get('index')}:{v.get('milli')}" if isinstance(v, dict) and "index" in v else str(v)
            for v in value
        )
    text = str(value)
    return json.dumps(text) if not text or any(c in text for c in ' "=\\') else text


def decision_line(type_: str, action: str, pod: PodInfo, message: str, extra: Mapping[str, Any]) -> str:
    fields: dict[str, Any] = {"decision": type_, "action": action, "pod": pod.key, "queue": pod.queue}
    if pod.group:
        fields["job"] = pod.group
    fields |= {k: v for k, v in extra.items() if v is not None}
    if message:
        fields["message"] = message
    return " ".join(f"{k}={_logfmt(v)}" for k, v in fields.items())


def cluster_capacity(s: ClusterState) -> Resources:
    xp = s.xp
    live = xp.astype(s.valid, xp.int64)
    gpus = int(xp.sum(xp.astype(s.present & s.healthy, xp.int64) * live[:, None]))
    return Resources(
        gpu=float(gpus),
        cpu=float(xp.sum(s.total_cpu * live)),
        memory=float(xp.sum(s.total_mem * live)),
    )


def _resources(usage: tuple[int, int, int]) -> Resources:
    gpu_milli, cpu_milli, mem_mib = usage
    return Resources(gpu=gpu_milli / MILLI_PER_GPU, cpu=float(cpu_milli), memory=float(mem_mib))
