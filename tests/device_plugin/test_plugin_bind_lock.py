"""The `tessera.dev/bind-lock` value model shared by the scheduler and the device plugin."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from scheduler.api.bind_lock import BindLock


def test_round_trip_and_wire_format() -> None:
    since = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
    lock = BindLock.for_pod("team-a", "train-0", "8f1c", since)
    raw = lock.to_annotation()
    assert json.loads(raw) == {"pod": "team-a/train-0", "uid": "8f1c", "since": "2026-12-02T10:00:00Z"}
    back = BindLock.from_annotation(raw)
    assert back == lock and (back.namespace, back.name) == ("team-a", "train-0")
    assert back.age_seconds(since + timedelta(seconds=90)) == 90


def test_rfc3339_with_offset_and_naive_times() -> None:
    lock = BindLock.from_annotation('{"pod": "ns/p", "uid": "u", "since": "2026-12-02T11:00:00+01:00"}')
    assert lock.since == datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
    naive = BindLock.from_annotation('{"pod": "ns/p", "uid": "u", "since": "2026-12-02T10:00:00"}')
    assert naive.since.tzinfo is not None


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("{", "Expecting property name"),
        ("[]", "valid dictionary"),
        ('{"pod": "no-namespace", "uid": "u"}', 'pod must be "<namespace>/<name>"'),
        ('{"pod": "a/b/c", "uid": "u"}', 'pod must be "<namespace>/<name>"'),
        ('{"pod": "a/b", "uid": ""}', "uid"),
        ('{"pod": "a/b", "uid": "u", "since": "yesterday"}', "since"),
    ],
)
def test_malformed_values_give_one_line_reasons(raw: str, why: str) -> None:
    with pytest.raises(ValueError, match=r"annotation tessera\.dev/bind-lock is malformed") as err:
        BindLock.from_annotation(raw)
    assert why in str(err.value) and "\n" not in str(err.value)
