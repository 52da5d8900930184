"""Built-in priority classes (KAI Scheduler compatible values)."""

from __future__ import annotations

from dataclasses import dataclass

NON_PREEMPTIBLE_THRESHOLD = 100


@dataclass(frozen=True)
class PriorityClassInfo:
    name: str
    value: int

    @property
    def preemptible(self) -> bool:
        return self.value < NON_PREEMPTIBLE_THRESHOLD


PRIORITY_CLASSES: dict[str, PriorityClassInfo] = {
    p.name: p
    for p in (
        PriorityClassInfo("train", 50),
        PriorityClassInfo("build-preemptible", 75),
        PriorityClassInfo("build", 100),
        PriorityClassInfo("inference", 125),
    )
}
DEFAULT_PRIORITY_CLASS = "train"


def resolve_priority(
    class_name: str | None, value: int | None = None, preemptibility: str | None = None
) -> tuple[int, bool]:
    """Return (priority value, preemptible) for a pod.

    An explicit `value` (from spec.priority) wins over the class table; unknown class names fall back to
    the default class. `preemptibility` ("preemptible" / "non-preemptible") overrides the value rule.
    """
    if value is None:
        info = PRIORITY_CLASSES.get(class_name or DEFAULT_PRIORITY_CLASS, PRIORITY_CLASSES["train"])
        value = info.value
    preemptible = value < NON_PREEMPTIBLE_THRESHOLD
    if preemptibility == "preemptible":
        preemptible = True
    elif preemptibility == "non-preemptible":
        preemptible = False
    return value, preemptible
