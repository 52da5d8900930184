"""Containment: one bad object never stops scheduling for the others.

A long-running scheduler meets every kind of object a careless user or an attacker can write, and it has
bugs nobody has found yet. Whatever goes wrong while one object is handled is kept to that object: it is
marked (a pod pending with `InvalidRequest` and a one-line reason, a node unschedulable for Tessera, a
queue or pod group invalid, each reported where people look), recorded in the error log, and the cycle
goes on for everyone else. The boundaries, from the watch to the report, and why each is where it is:

1. **One watch event** (`ClusterMirror.apply`). Objects arrive one by one and are independent of each
   other; a pod that cannot be read becomes an invalid pod (`model.parse.invalid_pod`), a node one that takes no pod,
   a Queue or PodGroup is left out (or keeps its last valid spec) with its reason.
2. **One job** (`JobIndex.jobs`, `Session.open`, every action). The job is the unit the actions schedule
   (a gang is all or nothing), so it is the smallest unit a failure can be confined to without leaving a
   gang half placed. A failing step's traceback names the job it was handling (`culprit`: the innermost
   frame holding a pod or a job); the transaction it left open is rolled back, the job is quarantined
   (left out of scheduling until one of its pods or its PodGroup changes, or a backoff passes; its
   running pods stay charged) and the step runs again for the others. The pipeline does this around each action
   (`scheduler/cycle.py`), so no action has to know about it and a new one is contained as well.
3. **One report** (pending reasons, queue and pod-group status, warnings): telling people about one
   object never keeps the others from being told.

A failure that names no job (a bug in an action's own bookkeeping) skips that action for this cycle; the
next actions and the reports still run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from scheduler.model.jobs import Job, job_key
from scheduler.model.types import PodInfo

log = logging.getLogger(__name__)

MAX_LINE = 300  # a reason shown on a pod, node or queue: one line, bounded
# Jobs one step may quarantine in one cycle before it is skipped for the cycle (a bug that every job hits
# must not cost one retry per job).
MAX_CULPRITS = 8


def one_line(exc: BaseException) -> str:
    """An error as one readable line: "spec.resources.gpu: Value error, limit 2 is below quota 4"."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            parts.append(f"{where}: {err['msg']}" if where else err["msg"])
        text = "; ".join(parts)
    else:
        lines = str(exc).splitlines()
        text = lines[0] if lines and lines[0] else type(exc).__name__
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


def object_name(obj: Any) -> str:
    """The name of an object that may be malformed, to report it by ("?" when it has none)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return str(name)[:253] if name else "?"


def failure(exc: BaseException) -> str:
    """An unexpected failure as one line that names its kind (a bug, not the user's input)."""
    return f"{type(exc).__name__}: {one_line(exc)}"


# ------------------------------------------------------------------------------------------------ culprits
def culprit(exc: BaseException) -> str | None:
    """The key of the job the failing code was handling: the innermost frame of the traceback that holds a
    pod or a job as a local variable (a pod names its job). None when no frame does."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        key = _job_of(frame.f_locals)
        if key is not None:
            return key
    return None


def _job_of(local_vars: Mapping[str, Any]) -> str | None:
    job: str | None = None
    for value in local_vars.values():
        if isinstance(value, PodInfo):
            return job_key(value)  # the most specific: the pod being handled
        if job is None and isinstance(value, Job):
            job = value.key
        elif job is None and isinstance(getattr(value, "job", None), Job):  # a victim, a plan's entry
            job = value.job.key
    return job


@dataclass(frozen=True)
class Quarantined:
    """A job left out of scheduling: why, its members (as they were), and the cycle it is tried again in.

    A change of any member or of its PodGroup lifts it at once. Otherwise it is tried again after a backoff
    that doubles with each failure (`retry_after`): a job blamed for a failure that was not its own (the
    traceback's innermost job is a guess when the bug is elsewhere) is delayed, never shut out."""

    message: str
    members: tuple[PodInfo, ...]
    until: int  # the job index's cycle number from which it is tried again
    strikes: int = 1


MAX_BACKOFF_CYCLES = 64
RETRIED = "it is tried again when it changes, or after a while"


def retry_after(strikes: int) -> int:
    """Cycles a job quarantined `strikes` times in a row waits before it is tried again."""
    return min(1 << strikes, MAX_BACKOFF_CYCLES)
