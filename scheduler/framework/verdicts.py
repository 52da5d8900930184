"""Why pods wait, as the actions find it during a cycle: typed verdicts, made into messages only when the
cycle reports them.

An action that leaves a pod waiting gives it a `Verdict`: a `Reason`, whose kind of wait
(`scheduler/model/reasons.py`) is what the later actions read to know whether they may help (consolidate
and reclaim act on pods waiting for room, preempt also on their queue's rules), and what the action
found. A later action that finds more adds its finding to the verdict, keeping the reason or giving its
own; the same finding is never written twice. Nothing reads the message people see: it is the findings
joined, made when the cycle reports (`Verdicts.reports`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from scheduler.model.reasons import PendingReason, Reason, Wait
from scheduler.model.types import PodInfo


@dataclass(frozen=True, slots=True)
class Verdict:
    reason: Reason
    findings: tuple[str, ...]  # what the actions found, in the order people read it

    @property
    def wait(self) -> Wait:
        return self.reason.wait

    def message(self) -> str:
        return "; ".join(self.findings)

    def report(self) -> PendingReason:
        return PendingReason(self.reason, self.message())


class Verdicts:
    """The cycle's verdicts, by pod uid."""

    def __init__(self) -> None:
        self._by_uid: dict[str, Verdict] = {}

    def tell(self, pod: PodInfo, reason: Reason, finding: str) -> None:
        """`pod` waits for `reason`, as `finding` says (whatever was found before is replaced)."""
        self._by_uid[pod.uid] = Verdict(reason, (finding,))

    def note(self, pod: PodInfo, finding: str, otherwise: Reason | None = None) -> None:
        """Add `finding` to `pod`'s verdict, after what was found before, keeping its reason; a pod with no
        verdict yet gets one of `otherwise` (None: nothing)."""
        old = self._by_uid.get(pod.uid)
        if old is not None:
            self._by_uid[pod.uid] = Verdict(old.reason, _with(old.findings, finding, first=False))
        elif otherwise is not None:
            self._by_uid[pod.uid] = Verdict(otherwise, (finding,))

    def retell(self, pod: PodInfo, reason: Reason, finding: str, *, first: bool = False) -> None:
        """`pod` waits for `reason` now, as `finding` says, after what was found before (before it, with
        `first`: the new finding leads and the earlier ones are its context)."""
        old = self._by_uid.get(pod.uid)
        findings = _with(old.findings, finding, first=first) if old is not None else (finding,)
        self._by_uid[pod.uid] = Verdict(reason, findings)

    def clear(self, pod: PodInfo) -> None:
        """`pod` waits no more (it was placed)."""
        self._by_uid.pop(pod.uid, None)

    def get(self, uid: str) -> Verdict | None:
        return self._by_uid.get(uid)

    def wait(self, pod: PodInfo) -> Wait | None:
        """The kind of wait of `pod`'s verdict (None: none yet this cycle)."""
        v = self._by_uid.get(pod.uid)
        return v.wait if v is not None else None

    def __contains__(self, uid: object) -> bool:
        return uid in self._by_uid

    def __len__(self) -> int:
        return len(self._by_uid)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_uid)

    def reports(self) -> dict[str, PendingReason]:
        """Every verdict as people read it (reason and message), by pod uid."""
        return {uid: v.report() for uid, v in self._by_uid.items()}


def _with(findings: tuple[str, ...], finding: str, *, first: bool) -> tuple[str, ...]:
    """`findings` with `finding` added once: last, or first (moved there if it was found before)."""
    if first:
        return (finding, *(f for f in findings if f != finding))
    return findings if finding in findings else (*findings, finding)
