"""Whether one pod fits on a node once some victims are gone, by arithmetic on that node's row.

The victim solver asks this for many sets of victims per node (`solver.py`, reclaim, preempt and
consolidation alike): the node's free capacity and the pod's need per GPU are read from the arrays once
(`RowFit.of`), and each set is judged by adding what it frees (`freed_on`) without evicting or scoring
anything. Only the plan chosen is tried for real.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.actions.victims import Victim
from scheduler.cache.ledger import Holding
from scheduler.framework.session import Session
from scheduler.placement.filters import gpu_need
from scheduler.state.demand import PodDemand


@dataclass
class Freed:
    """What some pods free on one node."""

    gpus: dict[int, tuple[int, int]] = field(default_factory=dict)  # per GPU slot: (milli, MiB)
    cpu: int = 0
    mem: int = 0
    pods: int = 0
    scalars: dict[str, int] = field(default_factory=dict)  # other resources, by name


@dataclass
class RowFit:
    """One node's free capacity, to tell by arithmetic whether a pod fits once some victims are gone."""

    ok: bool
    free_milli: list[int]
    free_mib: list[int]
    usable: list[bool]
    need_milli: list[int]
    need_mib: list[int]
    cpu: int
    mem: int
    pods: int
    scalars: dict[str, int]  # what is left of each other resource the pod requests

    @classmethod
    def of(cls, session: Session, d: PodDemand, row: int, static: Any) -> RowFit:
        """Row `row` now; `static`: bool[N] nodes that could host the pod if they were empty."""
        s, xp = session.state, session.xp
        exclude = session.excluded(d)
        ok = bool(static[row]) and (exclude is None or not bool(exclude[row]))
        milli, mib = gpu_need(s.take_rows([row]), d)
        free_mib = xp.minimum(s.free_mib[row, :], s.report_free_mib[row, :])
        return cls(
            ok=ok,
            free_milli=[int(x) for x in s.host(s.free_milli[row, :])],
            free_mib=[int(x) for x in s.host(free_mib)],
            usable=[bool(x) for x in s.host(s.present[row, :] & s.healthy[row, :])],
            need_milli=[int(x) for x in s.host(milli[0, :])],
            need_mib=[int(x) for x in s.host(mib[0, :])],
            cpu=int(s.free_cpu[row]),
            mem=int(s.free_mem[row]),
            pods=int(s.free_pods[row]),
            scalars={
                name: int(s.free_scalar[row, col]) if (col := s.scalars.get(name)) is not None else 0
                for name, _ in d.scalars
            },
        )

    def fits(self, d: PodDemand, f: Freed) -> bool:
        if not self.ok or self.cpu + f.cpu < d.cpu_milli or self.mem + f.mem < d.memory_mib:
            return False
        if self.pods + f.pods < 1:
            return False
        if any(self.scalars[name] + f.scalars.get(name, 0) < amount for name, amount in d.scalars):
            return False
        freed = f.gpus
        if not d.uses_gpu:
            return True
        gpus = 0
        for j, usable in enumerate(self.usable):
            if not usable:
                continue
            milli, mib = freed.get(j, (0, 0))
            if (
                self.free_milli[j] + milli >= self.need_milli[j]
                and self.free_mib[j] + mib >= self.need_mib[j]
            ):
                gpus += 1
        return gpus >= d.num_gpus


def freed_on(held: Mapping[str, Holding], row: int, victims: list[Victim]) -> Freed:
    """What the victims' pods on `row` free there (a pod shared by two units, an elastic member and its
    whole gang, counted once); `held`: the ledger's holdings by pod uid."""
    f = Freed()
    seen: set[str] = set()
    for v in victims:
        for p in v.pods:
            pl = held[p.uid].placement
            if pl.node != row or p.uid in seen:
                continue
            seen.add(p.uid)
            f.cpu, f.mem, f.pods = f.cpu + pl.cpu_milli, f.mem + pl.memory_mib, f.pods + 1
            for g in pl.gpus:
                m, b = f.gpus.get(g.slot, (0, 0))
                f.gpus[g.slot] = (m + g.milli, b + g.mib)
            for name, amount in pl.scalars:
                f.scalars[name] = f.scalars.get(name, 0) + amount
    return f
