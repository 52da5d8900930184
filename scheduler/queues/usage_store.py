"""Where the queues' usage history is kept between scheduler runs (time-based fair share).

In Kubernetes a ConfigMap in the scheduler's namespace (`scheduler/kube/usage_store.py`): it survives a
restart and a change of leader. The simulator and the tests keep it in memory, serialised the same way,
so that a restart there goes through exactly the same JSON.
"""

from __future__ import annotations

import json
import logging
from typing import Protocol

from pydantic import ValidationError

from scheduler.api.usage import UsageHistoryRecord

log = logging.getLogger(__name__)


class UsageStoreError(RuntimeError):
    """The history could not be read or written now (the API server, a conflict); retried later."""


class UsageStore(Protocol):
    def load(self) -> UsageHistoryRecord | None:
        """The saved history; None when none was ever saved (or what is saved is not a history: it is
        then kept aside by the next save, never lost). Raises UsageStoreError when it cannot tell (then
        nothing may be saved over it)."""
        ...

    def save(self, record: UsageHistoryRecord) -> None:
        """Replace the saved history. Raises UsageStoreError."""
        ...


def parse_record(text: str, where: str) -> UsageHistoryRecord | None:
    """A saved history, or None when the text is not one (logged): such a history is started afresh,
    rather than blocking time-based fair share until a person repairs it; the store keeps the text."""
    try:
        return UsageHistoryRecord.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        log.error("%s does not hold a usage history (%s); starting a new one, the old text is kept aside",
                  where, str(exc).splitlines()[0])  # fmt: skip
        return None


def dump_record(record: UsageHistoryRecord) -> str:
    return json.dumps(record.model_dump(by_alias=True, mode="json"), separators=(",", ":"))


class MemoryUsageStore:
    """A store in memory, written as the ConfigMap's JSON is."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.unreadable: str | None = None  # what was there when it was not a history
        self.saves = 0

    def load(self) -> UsageHistoryRecord | None:
        if self.text is None:
            return None
        record = parse_record(self.text, "the in-memory store")
        if record is None:
            self.unreadable = self.text
        return record

    def save(self, record: UsageHistoryRecord) -> None:
        self.text = dump_record(record)
        self.saves += 1
