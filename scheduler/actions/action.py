"""The action contract (KAI Scheduler's `Execute(ssn)`): one step of the cycle's pipeline.

An action is an object made once per scheduler, so memory it keeps across cycles (what consolidation
found futile, since when a gang is below minMember) belongs to it and to nothing else.
"""

from __future__ import annotations

from typing import Protocol

from scheduler.cache.cluster import Cluster
from scheduler.framework.session import Session


class Action(Protocol):
    name: str

    def execute(self, session: Session, cluster: Cluster) -> None: ...
