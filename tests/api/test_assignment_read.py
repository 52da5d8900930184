"""The mirror's reader of `tessera.dev/gpu-assignment` (`read_assignment`, msgspec) reads every text the
way the schema (`GPUAssignment`, pydantic) does: the same values, or a refusal with the same reason. A
text it would read otherwise is never read by its fast path (it falls back to the schema)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.assignment import (
    Admission,
    AdmissionReading,
    AssignedGPU,
    AssignmentReading,
    GPUAssignment,
    GPUReading,
    read_assignment,
)
from scheduler.api.limits import MAX_GPU_MEMORY_MIB, MAX_GPUS_PER_NODE, MAX_PRIORITY

# Values at and around every bound either reader checks, of every JSON type.
_EDGE_INTS = [-1, 0, 1, 7, 63, 64, 999, 1000, 1001, MAX_GPU_MEMORY_MIB, MAX_GPU_MEMORY_MIB + 1,
              -MAX_PRIORITY, -MAX_PRIORITY - 1, MAX_PRIORITY, MAX_PRIORITY + 1, 1 << 70]  # fmt: skip
_ODD: list[Any] = [None, True, False, 1.0, 1.5, "1", "true", "", [], {}]
_TIMES = ["2026-12-05T03:56:53.612015Z", "2026-12-05T03:56:53Z", "2026-12-05T03:56:53+01:00",
          "2026-12-05T03:56:53", "2026-12-05 03:56:53Z", "2026-12-05", "2026-12-05T03:56:53.1234567Z",
          "2026-02-30T00:00:00Z", "2026-12-05T23:59:60Z", "2026-12-05T03:56:53.612015z", 1733370000,
          "1733370000", "not a time", None]  # fmt: skip
values = st.one_of(st.sampled_from(_EDGE_INTS), st.sampled_from(_ODD), st.integers(), st.text(max_size=6))


def mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Values of a field: mostly of its type, at and just past its bounds; sometimes anything."""
    return st.integers(0, 9).flatmap(lambda i: values if i == 0 else valid)  # (one_of would flatten `values`)


def within(lo: int, hi: int, *bounds: int) -> st.SearchStrategy[int]:
    """Mostly in [lo, hi]; a quarter of the time at or one past a bound."""
    edges = st.sampled_from([b + d for b in bounds for d in (-1, 0, 1)])
    return st.integers(0, 3).flatmap(lambda i: edges if i == 0 else st.integers(lo, hi))


def names(*lengths: int) -> st.SearchStrategy[str]:
    edges = st.sampled_from(["x" * n for n in lengths])
    return st.integers(0, 3).flatmap(lambda i: edges if i == 0 else st.text(min_size=1, max_size=8))


@st.composite
def gpus(draw: st.DrawFn) -> dict[str, Any]:
    g: dict[str, Any] = {
        "index": draw(mostly(within(0, 7, 0, MAX_GPUS_PER_NODE))),
        "uuid": draw(mostly(st.text(max_size=8))),
        "milli": draw(mostly(within(1, 1000, 1, 1000))),
        "memoryMiB": draw(mostly(within(0, 81920, 0, MAX_GPU_MEMORY_MIB))),
    }
    if draw(st.integers(0, 3)) == 0:  # one left out
        del g[draw(st.sampled_from(sorted(g)))]
    if draw(st.integers(0, 3)) == 0:  # another spelling of a field, or one no reader knows
        g[draw(st.sampled_from(["memory_mib", "Index", "extra"]))] = draw(values)
    return g


@st.composite
def texts(draw: st.DrawFn) -> str:
    a: dict[str, Any] = {
        "node": draw(mostly(names(0, 1))),
        "gpus": draw(mostly(st.integers(0, 7).flatmap(
            lambda i: st.lists(gpus(), min_size=64, max_size=65) if i == 0 else st.lists(gpus(), max_size=2)))),
        "assumedAt": draw(st.sampled_from(_TIMES[:2] * 6 + _TIMES)),
        "admitted": draw(mostly(st.one_of(st.none(), st.fixed_dictionaries({
            "queue": mostly(names(0, 253, 254)),
            "job": mostly(names(0, 514, 515)),
            "priority": mostly(within(-10, 10, -MAX_PRIORITY, MAX_PRIORITY)),
            "preemptible": mostly(st.booleans()),
        }, optional={"extra": values})))),
    }  # fmt: skip
    if draw(st.integers(0, 3)) == 0:
        del a[draw(st.sampled_from(sorted(a)))]
    if draw(st.integers(0, 3)) == 0:
        a[draw(st.sampled_from(["assumed_at", "Node", "extra"]))] = draw(values)
    text = json.dumps(a)
    if draw(st.integers(0, 19)) == 0:  # not JSON, or not a map
        text = draw(st.sampled_from([text[:-1], text + "x", "[]", "null", "", '"text"', "{"]))
    return text


def _read(reader: Callable[[str], GPUAssignment | AssignmentReading], text: str) -> tuple[str, Any]:
    """What `reader` makes of `text`: the values the scheduler uses, or its refusal."""
    try:
        a = reader(text)
    except ValueError as exc:
        return "refused", str(exc)
    ad = a.admitted
    return "read", (
        a.node,
        tuple((g.index, g.milli, g.uuid, g.memory_mib) for g in a.gpus),
        (ad.queue, ad.job, ad.priority, ad.preemptible) if ad is not None else None,
    )


def _schema(text: str) -> tuple[str, Any]:
    return _read(GPUAssignment.from_annotation, text)


def _mirror(text: str) -> tuple[str, Any]:
    return _read(read_assignment, text)


_GPU = {"index": 1, "uuid": "GPU-1", "milli": 500, "memoryMiB": 40960}
_ADMITTED = {"queue": "q", "job": "ns/j", "priority": 1, "preemptible": True}


def _text(gpus: list[dict[str, Any]] | None = None, **fields: Any) -> str:
    return json.dumps(
        {"node": "n", "gpus": [_GPU] if gpus is None else gpus, "admitted": _ADMITTED, **fields}
    )


# Texts one bound or one spelling away from what is read: each reader must say the same of them.
_NEAR = [
    _text([{**_GPU, "memoryMiB": MAX_GPU_MEMORY_MIB}]),
    _text([{**_GPU, "memoryMiB": MAX_GPU_MEMORY_MIB + 1}]),
    _text([{"index": 1, "milli": 500, "memory_mib": 40960}]),  # the field's name, which the schema takes too
    _text([_GPU] * MAX_GPUS_PER_NODE),
    _text([_GPU] * (MAX_GPUS_PER_NODE + 1)),
    _text(admitted={**_ADMITTED, "job": "x" * 514}),
    _text(admitted={**_ADMITTED, "job": "x" * 515}),
    _text(admitted={**_ADMITTED, "queue": "x" * 254}),
    _text(admitted={**_ADMITTED, "priority": MAX_PRIORITY + 1}),
    _text(admitted={**_ADMITTED, "extra": 1}),
    _text(assumed_at="2026-12-05T03:56:53Z"),
    _text([{**_GPU, "milli": "500"}]),
    _text([{**_GPU, "milli": 500.0}]),
    _text(admitted={**_ADMITTED, "preemptible": "true"}),
]


@pytest.mark.parametrize("text", _NEAR)
def test_texts_near_a_bound_are_read_alike(text: str) -> None:
    assert _mirror(text) == _schema(text)


@settings(max_examples=500, deadline=None)
@given(texts())
def test_the_mirror_reads_every_text_as_the_schema_does(text: str) -> None:
    assert _mirror(text) == _schema(text)


@pytest.mark.parametrize("when", _TIMES)
def test_times_are_read_or_refused_alike(when: object) -> None:
    text = json.dumps({"node": "n", "assumedAt": when})
    assert _mirror(text) == _schema(text)
    if _mirror(text)[0] == "read" and isinstance(when, str) and "T" in when:
        # (beyond the microsecond, which the scheduler never writes, one rounds and the other truncates)
        ours, theirs = read_assignment(text).assumed_at, GPUAssignment.from_annotation(text).assumed_at
        assert isinstance(ours, datetime)
        assert abs((ours - theirs).total_seconds()) <= 1e-6


def test_what_the_scheduler_writes_is_read_whole_on_the_fast_path() -> None:
    when = datetime(2026, 12, 5, 3, 56, 53, 612015, tzinfo=UTC)
    written = GPUAssignment(
        node="node-7",
        gpus=[AssignedGPU(index=3, uuid="GPU-7-3", milli=500, memory_mib=40960)],
        assumed_at=when,
        admitted=Admission(queue="team-a", job="ns/train", priority=-5, preemptible=False),
    ).to_annotation()
    read_assignment.cache_clear()
    assert read_assignment(written) == AssignmentReading(
        node="node-7",
        gpus=(GPUReading(index=3, milli=500, uuid="GPU-7-3", memory_mib=40960),),
        assumed_at=when,
        admitted=AdmissionReading(queue="team-a", job="ns/train", priority=-5, preemptible=False),
    )
    assert read_assignment(written) is read_assignment(written)  # read once


def test_a_refusal_names_the_field_as_the_schema_does() -> None:
    text = json.dumps({"node": "n", "gpus": [{"index": MAX_GPUS_PER_NODE, "milli": 1000}]})
    with pytest.raises(ValueError, match=r"gpus\.0\.index"):
        read_assignment(text)
