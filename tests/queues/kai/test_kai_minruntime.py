"""KAI Scheduler's minruntime plugin tests, ported: which queue's minimum runtime applies (its resolver
tests, as data in `cases/minruntime_resolver.yaml`) and the Queue field's duration grammar (its
`parseMinRuntime` test). Its filter and scenario-validator tests run as action tables
(`cases/minruntime_test.yaml`, run by test_kai_tables.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from scheduler.api.meta import ObjectMeta
from scheduler.api.queue import Queue, QueueSpec
from scheduler.queues.min_runtime import MinRuntimes
from scheduler.queues.tree import QueueTree

DATA = yaml.safe_load((Path(__file__).parent / "cases" / "minruntime_resolver.yaml").read_text())


def _tree(extra: list[dict[str, Any]] | None = None) -> QueueTree:
    queues = []
    for q in [*DATA["queues"], *(extra or [])]:
        spec: dict[str, Any] = {"parentQueue": q.get("parent")}
        if "preempt" in q:
            spec["preemptMinRuntime"] = q["preempt"]
        if "reclaim" in q:
            spec["reclaimMinRuntime"] = q["reclaim"]
        queues.append(Queue(metadata=ObjectMeta(name=q["name"]), spec=QueueSpec.model_validate(spec)))
    return QueueTree(queues)


@pytest.mark.parametrize("case", DATA["preempt"], ids=[c["kai"] for c in DATA["preempt"]])
def test_preempt_min_runtime_is_the_victims_queue_walking_up(case: dict[str, Any]) -> None:
    assert MinRuntimes(_tree()).preempt_s(case["victim"]) == case["want"]


@pytest.mark.parametrize("case", DATA["reclaim"], ids=[c["kai"] for c in DATA["reclaim"]])
def test_reclaim_min_runtime_is_resolved_below_the_common_ancestor(case: dict[str, Any]) -> None:
    runtimes = MinRuntimes(_tree(case.get("extra")))
    assert runtimes.reclaim_s(case["reclaimer"], case["victim"]) == case["want"]


@pytest.mark.parametrize("case", DATA["ancestors"], ids=[c["kai"] for c in DATA["ancestors"]])
def test_queue_paths(case: dict[str, Any]) -> None:
    tree = _tree(case.get("extra"))
    assert [n.name for n in reversed(tree.ancestors(case["queue"]))] == case["want"]


# minruntime_test.go, parseMinRuntime: KAI parses its plugin arguments with days and weeks too; a Queue's
# fields are metav1.Duration (Go's time.ParseDuration) in KAI and in Tessera, which has neither.
@pytest.mark.parametrize("text", ["5s", "10s", "10m5s", "1m", "1.5s", "2m30s", "1h", "1h30m", "2h45m15s"])
def test_parse_min_runtime_sanity(text: str) -> None:
    assert (QueueSpec.model_validate({"reclaimMinRuntime": text}).reclaim_min_runtime_s or 0) > 0


@pytest.mark.parametrize("text", ["5", "1h2", "2h45m15", "abc", "1h-30m", "dfdsfdfdf", "2d4h30m", "5w4d12h"])
def test_invalid_min_runtime_is_refused(text: str) -> None:
    with pytest.raises(ValidationError, match="is not a duration"):
        QueueSpec.model_validate({"preemptMinRuntime": text})


@pytest.mark.parametrize("text", ["-5s", "-10m", "-1h"])
def test_negative_min_runtime_is_refused(text: str) -> None:
    """KAI's plugin reads a negative default as 0 with an error in its log; a Queue says so at once."""
    with pytest.raises(ValidationError, match="cannot be negative"):
        QueueSpec.model_validate({"reclaimMinRuntime": text})


def test_min_runtime_round_trips_and_zero_means_none() -> None:
    spec = QueueSpec.model_validate({"preemptMinRuntime": "1h30m", "reclaimMinRuntime": "0"})
    assert spec.preempt_min_runtime_s == 5400 and spec.reclaim_min_runtime_s == 0
    assert spec.model_dump(by_alias=True, exclude_none=True)["preemptMinRuntime"] == "1h30m"
    with pytest.raises(ValidationError, match="more than the largest"):
        QueueSpec.model_validate({"preemptMinRuntime": "9000h"})
