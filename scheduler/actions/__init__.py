"""Scheduling actions, run in order every cycle on the session (KAI Scheduler's action pipeline).

Every step is named in the pipeline: `bind_reserved` (pods moved by consolidation go where their move was
planned), `allocate`, `consolidate`, `reclaim`, `preempt`, `stale_gang`. An unknown name is an error.
"""

from collections.abc import Callable, Iterable

from scheduler.actions.action import Action
from scheduler.actions.allocate import Allocate
from scheduler.actions.consolidate import Consolidate
from scheduler.actions.preempt import Preempt
from scheduler.actions.reclaim import Reclaim
from scheduler.actions.reserved import BindReserved
from scheduler.actions.stale_gang import StaleGang

ActionFactory = Callable[[], Action]

ACTIONS: dict[str, ActionFactory] = {
    "bind_reserved": BindReserved,
    "allocate": Allocate,
    "consolidate": Consolidate,
    "reclaim": Reclaim,
    "preempt": Preempt,
    "stale_gang": StaleGang,
}
DEFAULT_ACTIONS = ("bind_reserved", "allocate", "consolidate", "reclaim", "preempt", "stale_gang")


def register_action(name: str, factory: ActionFactory) -> None:
    ACTIONS[name] = factory


def make_actions(names: Iterable[str]) -> list[Action]:
    """One fresh action per name, in order. Raises ValueError naming every unknown one."""
    names = list(names)
    unknown = [n for n in names if n not in ACTIONS]
    if unknown:
        raise ValueError(
            f"unknown action(s) {', '.join(map(repr, unknown))}; choose from {', '.join(ACTIONS)}"
        )
    return [ACTIONS[n]() for n in names]


__all__ = ["ACTIONS", "DEFAULT_ACTIONS", "Action", "ActionFactory", "make_actions", "register_action"]
