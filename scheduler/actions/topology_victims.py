"""What the victim solver (`solver.py`) needs to know of a waiting job's topology constraint.

A gang that must sit inside one domain gains nothing from victims spread over several: victims are
searched domain by domain (`domain_pools`), so the queue rules judge only sets that can make room in one
domain. A pod placed alone is searched for only on the nodes its constraint allows (`topology_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from scheduler.actions.topology_placement import home_rows, resolve
from scheduler.framework.session import Session
from scheduler.model.jobs import Job
from scheduler.placement.policy import Array

MAX_VICTIM_DOMAINS = 4  # required-level domains whose victims are searched, per waiting gang and cycle


class OnNodes(Protocol):
    @property
    def nodes(self) -> frozenset[int]: ...


V = TypeVar("V", bound=OnNodes)


def topology_rows(session: Session, job: Job) -> Array | None:
    """bool[C]: the rows a job's pod may take under its topology constraint (all False when the constraint
    cannot be used); None: the job has none. For searches that place one pod by arithmetic per node."""
    if job.topology is None:
        return None
    scope = resolve(session.state, session.cache.topologies, job.topology)
    if isinstance(scope, str):
        return session.xp.zeros((session.state.capacity,), dtype=session.xp.bool)
    return home_rows(session, job, scope)


def domain_pools(session: Session, job: Job, victims: Sequence[V]) -> list[list[V]] | None:
    """The victims split by the domain of the job's required level their pods are in (a victim on several
    domains is in each one's pool), victim order kept; the domains in the order their first victim comes
    (the most expendable first), at most MAX_VICTIM_DOMAINS. None: nothing to split by (no constraint, or
    no required level)."""
    if job.topology is None:
        return None
    scope = resolve(session.state, session.cache.topologies, job.topology)
    if isinstance(scope, str) or scope.required is None:
        return None
    codes = session.state.domain[:, scope.columns[scope.required]]
    pools: dict[int, list[V]] = {}
    for v in victims:
        for code in sorted({int(codes[r]) for r in v.nodes}):
            if code >= 0 and (code in pools or len(pools) < MAX_VICTIM_DOMAINS):
                pools.setdefault(code, []).append(v)
    return list(pools.values())
