"""Scheduling actions, run in order every cycle on the session (KAI Scheduler's action pipeline)."""

from collections.abc import Callable

from scheduler.actions.allocate import allocate
from scheduler.actions.consolidate import consolidate
from scheduler.actions.preempt import preempt
from scheduler.actions.reclaim import reclaim
from scheduler.actions.stale_gang import stale_gang
from scheduler.cluster import Cluster
from scheduler.session import Session

Action = Callable[[Session, Cluster], None]

ACTIONS: dict[str, Action] = {
    "allocate": allocate,
    "consolidate": consolidate,
    "reclaim": reclaim,
    "preempt": preempt,
    "stale_gang": stale_gang,
}
DEFAULT_ACTIONS = ("allocate", "consolidate", "reclaim", "preempt", "stale_gang")


def register_action(name: str, action: Action) -> None:
    ACTIONS[name] = action


__all__ = ["ACTIONS", "DEFAULT_ACTIONS", "Action", "register_action"]
