"""Scheduling actions, run in order every cycle on the session (KAI Scheduler's action pipeline)."""

from collections.abc import Callable

from scheduler.actions.allocate import allocate
from scheduler.cluster import Cluster
from scheduler.session import Session

Action = Callable[[Session, Cluster], None]

ACTIONS: dict[str, Action] = {"allocate": allocate}
DEFAULT_ACTIONS = ("allocate", "consolidate", "reclaim", "preempt", "stale_gang")


def register_action(name: str, action: Action) -> None:
    ACTIONS[name] = action


__all__ = ["ACTIONS", "DEFAULT_ACTIONS", "Action", "register_action"]
