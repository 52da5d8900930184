"""The usage time-based fair share divides by: decayed, windowed, normalised to the cluster's capacity
(KAI Scheduler's formula; docs/fairshare.md)."""

from __future__ import annotations

import pytest

from scheduler.model.resources import Resources
from scheduler.queues.usage_history import UsageHistory, UsageParams

HOUR = 3600.0


def test_kai_docs_normalisation_example() -> None:
    """KAI's docs: on a 10-GPU cluster over a 10-hour window, a queue that used 24 GPU-hours scores 0.24
    (8 GPUs for 3 hours, or 12 for 2), whatever the other queues did."""
    for gpus, hours in ((8, 3), (12, 2)):
        h = UsageHistory(UsageParams(window_s=10 * HOUR, resolution_s=HOUR))
        h.record(0.0, {"q": Resources(gpu=gpus), "other": Resources(gpu=1)}, Resources(gpu=10))
        h.record(hours * HOUR, {"q": Resources(), "other": Resources(gpu=1)}, Resources(gpu=10))
        assert h.shares(10 * HOUR)["q"].gpu == pytest.approx(0.24)


def test_half_life_and_window() -> None:
    """A GPU-hour one half-life ago counts half a GPU-hour now; usage older than the window counts
    nothing; a bucket the window cuts through counts in proportion."""
    p = UsageParams(window_s=10 * HOUR, half_life_s=2 * HOUR, resolution_s=HOUR)
    h = UsageHistory(p)
    h.record(0.0, {"old": Resources(gpu=1)}, Resources(gpu=1))
    h.record(HOUR, {"new": Resources(gpu=1)}, Resources(gpu=1))
    h.record(2 * HOUR, {}, Resources(gpu=1))
    # At 2.5h: "old" used hour [0,1] (middle 2h ago: weight 1/2), "new" [1,2] (1h ago: 2**-0.5),
    # capacity also counts the last half hour (0.25h ago) at weight 2**-0.125.
    w_old, w_new, w_idle = 0.5, 2**-0.5, 2**-0.125
    cap = w_old + w_new + 0.5 * w_idle
    got = h.shares(2.5 * HOUR)
    assert got["old"].gpu == pytest.approx(w_old / cap) and got["new"].gpu == pytest.approx(w_new / cap)
    # At 10.5h the window starts at 0.5h: half of bucket [0,1] is inside. Buckets [2,3]..[9,10] are idle
    # hours; [10,10.5] has half an hour recorded (middle 10.25h).
    old = 0.5 * 0.5 ** ((10.5 - 0.5) / 2)
    cap = (
        old + 0.5 ** ((10.5 - 1.5) / 2) + sum(0.5 ** ((10 - k) / 2) for k in range(2, 10)) + 0.5 * 0.5**0.125
    )
    assert h.shares(10.5 * HOUR)["old"].gpu == pytest.approx(old / cap)
    assert h.shares(13 * HOUR + 1)["old"].gpu == 0.0  # out of the window altogether
