"""Placing a gang under its topology constraint (KAI Scheduler's topology plugin; docs/topology.md).

1. The constraint is resolved against its Topology: the levels tried run from the preferred one (or the
   required one) up to the required one (or, with no required level, the whole topology), innermost
   first, as KAI's `calculateRelevantDomainLevels` does.
2. At each level, every domain's capacity for the gang is a segment sum of how many of its pods each node
   can host now (`placement/topology.py`); the domains that hold all of them are tried tightest first (the
   highest share of their free GPU, CPU and memory the gang would take: bin packing, as KAI).
3. Inside the domain tried, the pods fill the preferred level's domains with the most room first (KAI
   scores nodes by that order), each pod through the session's placer restricted to one such domain's
   rows, so the policy still chooses the node and the GPUs.
A gang with members running stays in the required-level domain that holds them. Every placement is in
the caller's transaction; what a failed try placed is rolled back before the next is tried.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.api.topology import Topology, TopologyConstraint
from scheduler.framework.session import Session
from scheduler.framework.transaction import Transaction
from scheduler.model.jobs import Job
from scheduler.model.reasons import Reason
from scheduler.model.types import PodInfo
from scheduler.placement.filters import gpu_need
from scheduler.placement.policy import Array
from scheduler.placement.topology import (
    Runs,
    ancestors,
    domain_runs,
    dominant_ratio,
    order_by,
    pods_per_node,
    run_sums,
    segment_sum,
    split_levels,
)
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand, demand_for

MAX_DOMAINS = 16  # candidate domains tried per level (the tightest ones)
# Domains filled per gang and cycle, over all levels (work, not seconds, so that a simulation decides the
# same on any machine: scheduler/framework/budget.py); beyond this, the next cycle tries again.
MAX_TRIES = 24


@dataclass(frozen=True)
class Scope:
    """A constraint resolved against its Topology."""

    topology: str
    columns: tuple[int, ...]  # `ClusterState.domain` column of each level, outermost first
    names: tuple[str, ...]  # each level as people read it (alias, else label key)
    required: int | None  # level index
    preferred: int | None

    def levels(self) -> list[int | None]:
        """Levels tried, innermost first; None stands for the whole topology."""
        low = self.preferred if self.preferred is not None else self.required
        assert low is not None
        top = self.required if self.required is not None else -1
        return [lv if lv >= 0 else None for lv in range(low, top - 1, -1)]


def resolve(state: ClusterState, topologies: Mapping[str, Topology], c: TopologyConstraint) -> Scope | str:
    """The constraint's scope, or why it cannot be used (a person must fix it)."""
    if not c.topology:
        return f"names a topology level ({c.describe()}) but no topology"
    t = topologies.get(c.topology)
    if t is None:
        return f"topology {_short(c.topology)} does not exist (kubectl get topologies)"
    if not (c.required_topology_level or c.preferred_topology_level):
        return f"names topology {c.topology} but no required or preferred level"
    idx: dict[str, int | None] = {}
    for what, level in (("required", c.required_topology_level), ("preferred", c.preferred_topology_level)):
        idx[what] = None if level is None else t.level_index(level)
        if level is not None and idx[what] is None:
            known = ", ".join(lv.name for lv in t.spec.levels)
            return f"topology {t.name} has no level {_short(level)} ({what}); its levels: {known}"
    req, pref = idx["required"], idx["preferred"]
    if req is not None and pref is not None and pref < req:
        pref = req  # a preferred level above the required one adds nothing (KAI ignores it too)
    columns = tuple(state.domains.column[(t.name, i)] for i in range(len(t.spec.levels)))
    return Scope(t.name, columns, tuple(lv.name for lv in t.spec.levels), req, pref)


def place_in_topology(
    session: Session,
    tx: Transaction,
    job: Job,
    pods: list[PodInfo],
    need: int,
    *,
    probe: bool = False,
    fill: bool = True,
    explain: bool = True,
) -> int:
    """Place `need` of `pods` (the job's pending members, in order) inside one domain of the job's
    constraint, and with `fill` as many more of them as fit there; return how many were placed (0, and
    nothing left in the transaction, when fewer than `need` fit). `probe`: by the session's cheap placer
    (a victim search trying a plan), else by its policy; `explain`: tell the pods why they wait when the
    gang does not fit."""
    assert job.topology is not None
    scope = resolve(session.state, session.cache.topologies, job.topology)
    if isinstance(scope, str):
        if explain:
            for p in pods:
                session.set_reason(p, Reason.INVALID_TOPOLOGY, f"{_who(job)}: {scope}")
        return 0
    t0 = time.perf_counter()
    gang = GangFit(session, job, pods, need, scope)
    tried: list[tuple[int | None, int]] = []
    for level in scope.levels():
        for code in gang.candidates(level)[:MAX_DOMAINS]:
            if len(tried) >= MAX_TRIES:
                break
            cp = tx.checkpoint()
            placed = gang.fill(tx, level, code, probe=probe, limit=None if fill else need)
            if placed >= need:
                session.add_time("scoring", time.perf_counter() - t0)
                return placed
            tx.rollback_to(cp)
            tried.append((level, code))
    session.add_time("scoring", time.perf_counter() - t0)
    if explain:
        message = gang.why_not(tried)
        for p in pods:
            session.set_reason(p, Reason.TOPOLOGY_UNSATISFIED, message)
    return 0


def _short(text: str, most: int = 80) -> str:
    """A name as quoted in a message (an annotation may hold anything)."""
    return text if len(text) <= most else text[: most - 1] + "…"


def _who(job: Job) -> str:
    return ("gang " if job.is_gang else "pod ") + job.key.removeprefix("pod:")


def home_rows(session: Session, job: Job, scope: Scope) -> Array:
    """bool[C]: the rows the job's pods may use: the topology's nodes, and with a required level and
    members already holding places (running, placed this cycle or reserved), only their domain there."""
    s = session.state
    rows = s.domain[:, scope.columns[-1]] >= 0
    req = scope.required
    if req is None:
        return rows
    held = session.ledger
    col = scope.columns[req]
    f = session.facts(job)
    placed = [held.placement(p.uid) for p in (*f.running, *f.reserved)]
    codes = [int(s.domain[pl.node, col]) for pl in placed if pl is not None]
    if not codes:
        return rows
    home = max(set(codes), key=codes.count)
    return rows & (s.domain[:, col] == home)


class GangFit:
    """A gang's figures over the node rows under its scope: per-node pod counts, free resources, and per
    domain of a level the capacity for the gang (computed when first asked). Built once per attempt: the
    figures are those of the state when it was built."""

    def __init__(self, session: Session, job: Job, pods: list[PodInfo], need: int, scope: Scope) -> None:
        self.session, self.job, self.pods, self.need, self.scope = session, job, pods, need, scope
        s: ClusterState = session.state
        xp = s.xp
        self.xp, self.s = xp, s
        self.in_topology = home_rows(session, job, scope)
        # Demands of the `need` pods that must fit (a gang's pods are nearly always alike: one entry).
        self.counts: dict[PodDemand, int] = {}
        for p in pods[:need]:
            d = demand_for(p)
            self.counts[d] = self.counts.get(d, 0) + 1
        self.per_node: dict[PodDemand, Array] = {}
        free_mib = xp.minimum(s.free_mib, s.report_free_mib)
        for d, count in self.counts.items():
            mask, fit = session.placer.feasible(d)
            busy = session.excluded(d)
            mask = mask & self.in_topology if busy is None else mask & self.in_topology & ~busy
            # Whole GPUs: a fitting GPU holds exactly one device-share (no division needed).
            milli, mib = gpu_need(s, d) if d.uses_gpu and not d.whole else (None, None)
            need_tuple = (milli, mib, d.num_gpus, d.cpu_milli, d.memory_mib)
            per_node = pods_per_node(
                xp, mask, fit, s.free_milli, free_mib, s.free_cpu, s.free_mem, need_tuple, count
            )
            per_node = xp.minimum(per_node, s.free_pods)  # one pod slot each, and their other resources
            for name, amount in d.scalars:
                col = s.scalars.get(name)
                left = s.free_scalar[:, col] // amount if col is not None else xp.zeros_like(per_node)
                per_node = xp.minimum(per_node, left)
            self.per_node[d] = per_node

        # Free resources per node (KAI compares a domain's idle resources with the gang's request).
        # (absent GPUs have no free milli; unhealthy ones and cordoned nodes count nothing)
        usable = s.healthy & s.valid[:, None]
        free_gpu = xp.sum(
            xp.where(usable, xp.astype(s.free_milli, xp.int64), xp.zeros_like(s.free_mib)), axis=1
        )
        live = xp.astype(s.valid, xp.int64)
        self.free = xp.stack([free_gpu, s.free_cpu * live, s.free_mem * live], axis=1)  # int64[C, 3]
        self.request = (
            sum(c * _gpu_milli(d) for d, c in self.counts.items()),
            sum(c * d.cpu_milli for d, c in self.counts.items()),
            sum(c * d.memory_mib for d, c in self.counts.items()),
        )
        self.total = sum(self.per_node.values(), start=xp.zeros(self.in_topology.shape, dtype=xp.int64))
        self.capacity: dict[int, list[Array]] = {}  # level -> per demand, int64[domains]
        self.ratio: dict[int, Array] = {}  # level -> float64[runs]
        self.runs = self._runs()
        self.sums: list[Array] | None = None

    def codes(self, level: int) -> Array:
        return self.s.domain[:, self.scope.columns[level]]

    def size(self, level: int) -> int:
        return self.s.domains.size(self.scope.columns[level])

    def capacities(self, level: int) -> list[Array]:
        """Per demand, int64[domains]: how many of its pods each domain of `level` can host now."""
        if level not in self.capacity:
            codes, size = self.codes(level), self.size(level)
            self.capacity[level] = [segment_sum(self.xp, codes, self.per_node[d], size) for d in self.counts]
        return self.capacity[level]

    def ranks(self, level: int) -> Array:
        """int64[domains]: each domain's rank in name order (ties between equal domains go by name)."""
        col = self.scope.columns[level]
        size = self.s.domains.size(col)
        kept = self.s.domains.derived.get(("ranks", col))
        if kept is None or kept[0] != size:
            kept = (size, self.xp.asarray(self.s.domains.ranks(col), dtype=self.xp.int64))
            self.s.domains.derived[("ranks", col)] = kept
        return kept[1]

    def _runs(self) -> Runs:
        """The topology's nodes sorted by domain path, kept until a node or a topology changes."""
        s, scope = self.s, self.scope
        kept = s.domains.derived.get(("runs", scope.topology))
        if kept is not None and kept[0] == s.node_epoch:
            return cast(Runs, kept[1])
        xp = self.xp
        inside = s.domain[:, scope.columns[-1]] >= 0
        rows = xp.astype(xp.nonzero(inside)[0], xp.int64)
        codes = xp.take(s.domain, rows, axis=0)[:, scope.columns[0] : scope.columns[-1] + 1]
        runs = domain_runs(xp, rows, codes)
        s.domains.derived[("runs", scope.topology)] = (s.node_epoch, runs)
        return runs

    def _sums(self) -> list[Array]:
        """Per level, int64[runs, demands + 3]: pods each domain holds per demand, then free GPU milli,
        CPU milli and MiB (one cumulative sum over the nodes in path order serves every level)."""
        if self.sums is None:
            xp = self.xp
            per_node = [xp.reshape(self.per_node[d], (-1, 1)) for d in self.counts]
            every = run_sums(xp, self.runs, xp.concat([*per_node, self.free], axis=1))
            self.sums = split_levels(self.runs, every)
            # KAI's ratio of the gang's request to each domain's free resources, every level at once.
            ratio = dominant_ratio(xp, self.request, every[:, len(self.counts) :])
            self.ratio = dict(enumerate(split_levels(self.runs, ratio)))
        return self.sums

    def _run_ratios(self, level: int) -> Array:
        """float64[runs]: KAI's ratio of the gang's request to each domain's free resources."""
        self._sums()
        return self.ratio[level]

    def tight_first(self, level: int, index: Array, top: int) -> Array:
        """int64[K]: the runs `index` of `level` ordered as KAI's sorted domain tree lists them: by the
        ratio of their enclosing domain at level `top`, then the next level down..., then their own,
        highest (tightest) first, ties by name."""
        xp = self.xp
        keys: list[Array] = []
        for k, run in zip(range(top, level + 1), ancestors(xp, self.runs, level, index, top), strict=True):
            code = xp.take(self.runs.codes[k], run)
            keys += [-xp.take(self._run_ratios(k), run), xp.take(self.ranks(k), code)]
        return xp.take(index, order_by(xp, keys))

    def candidates(self, level: int | None) -> list[int]:
        """Codes of the domains at `level` that can hold the gang now, the MAX_DOMAINS tightest first
        ([-1]: the whole topology, when it can)."""
        xp = self.xp
        if level is None:
            total = [int(xp.sum(self.per_node[d])) for d in self.counts]
            return [-1] if all(t >= c for t, c in zip(total, self.counts.values(), strict=True)) else []
        caps = self._sums()[level]
        ok = xp.ones((int(caps.shape[0]),), dtype=xp.bool)
        for i, count in enumerate(self.counts.values()):
            ok = ok & (caps[:, i] >= count)
        index = xp.astype(xp.nonzero(ok)[0], xp.int64)
        if int(index.shape[0]) == 0:
            return []
        codes = xp.take(self.runs.codes[level], self.tight_first(level, index, 0))
        return [int(codes[i]) for i in range(min(int(codes.shape[0]), MAX_DOMAINS))]

    def rows(self, level: int | None, code: int) -> Array:
        if level is None:
            return self.in_topology
        return self.in_topology & (self.codes(level) == code)

    def _groups(self, level: int | None, code: int) -> list[Array]:
        """bool[C] row sets to fill in turn: the domain's preferred-level domains, roomiest first (the
        reverse of KAI's sorted tree below the domain: its node score grows along that order)."""
        xp, rows = self.xp, self.rows(level, code)
        pref = self.scope.preferred
        if pref is None or (level is not None and pref <= level):
            return [rows]
        caps = self._sums()[pref][:, : len(self.counts)]
        ok = xp.sum(caps, axis=1) > 0
        if level is not None:  # only those inside the domain
            inside = self.runs.codes[level] == code
            runs = xp.astype(xp.arange(int(ok.shape[0])), xp.int64)
            ok = ok & xp.take(inside, ancestors(xp, self.runs, pref, runs, level)[0])
        index = xp.astype(xp.nonzero(ok)[0], xp.int64)
        order = self.tight_first(pref, index, 0 if level is None else level + 1)
        codes = xp.take(self.runs.codes[pref], order)
        prefs = self.codes(pref)
        return [rows & (prefs == int(codes[i])) for i in range(int(codes.shape[0]) - 1, -1, -1)]

    def fill(self, tx: Transaction, level: int | None, code: int, *, probe: bool, limit: int | None) -> int:
        """Place the pods (at most `limit`) inside one domain, its preferred-level domains filled in
        turn; how many were placed."""
        groups = self._groups(level, code)
        start: dict[PodDemand, int] = {}  # per demand, the first group that may still take one
        placed = 0
        for i, pod in enumerate(self.pods):
            if placed == limit:
                break
            d = demand_for(pod)
            g = start.get(d, 0)
            while g < len(groups):
                pl = self.session.probe_place(d, groups[g]) if probe else self.session.place(d, groups[g])
                if pl is not None:
                    tx.place(pod, self.job, pl)
                    placed += 1
                    break
                g += 1
            start[d] = g
            if g == len(groups) and placed + len(self.pods) - i - 1 < self.need:
                return placed  # the rest cannot reach `need`
        return placed

    def why_not(self, tried: list[tuple[int | None, int]]) -> str:
        """Which level could not be satisfied, with the domains closest to holding the gang."""
        xp, scope = self.xp, self.scope
        d = next(iter(self.counts))
        what = f"{self.need} pods of {d.describe()}" if self.need > 1 else d.describe()
        head = f"{_who(self.job)} needs {what}"
        if tried:
            names = ", ".join(self._name(lv, c) for lv, c in tried[:4])
            return (
                f"{head} inside one domain of topology {scope.topology}: {names} could hold them by count, "
                "but they did not all fit when placed (GPU shares in pieces, or other pods placed first)"
            )
        level = scope.required
        if level is None:
            total = int(xp.sum(self.per_node[d]))
            return f"{head} on the nodes of topology {scope.topology}; they can hold {total} now"
        cap = self.capacities(level)[0]
        size = int(cap.shape[0])
        best = sorted(range(size), key=lambda c: (-int(cap[c]), self.s.domains.name(scope.columns[level], c)))
        shown = ", ".join(
            f"{self.s.domains.name(scope.columns[level], c)} {int(cap[c])}"
            for c in best[:4]
            if int(cap[c]) > 0
        )
        more = f" (+{size - 4} more)" if size > 4 else ""
        return (
            f"{head} inside one {scope.names[level]} of topology {scope.topology} (required level); "
            "none can hold them now: " + (f"the most are {shown}{more}" if shown else "no domain has room")
        )

    def _name(self, level: int | None, code: int) -> str:
        if level is None:
            return f"topology {self.scope.topology}"
        return f"{self.scope.names[level]} {self.s.domains.name(self.scope.columns[level], code)}"


def _gpu_milli(d: PodDemand) -> int:
    """GPU milli a pod asks in all (a memory request counts as half a GPU per device: its milli depends on
    the GPU it lands on, and the ratio only orders domains)."""
    return d.num_gpus * (d.gpu_milli or MILLI_PER_GPU // 2)
