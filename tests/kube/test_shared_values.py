"""The pod watch's table of shared values (`kube/shared_values.py`): equal plain values are kept once, values
that Python calls equal but that read differently are not, what it keeps is frozen (model/frozen.py) until
no cached object holds it, and what it cannot key is copied, never kept."""

from __future__ import annotations

import copy

from scheduler.kube import shared_values
from scheduler.kube.shared_values import SharedValues
from scheduler.model import frozen
from scheduler.model.frozen import is_frozen


def test_equal_values_are_kept_once() -> None:
    shared = SharedValues()
    first = shared.share([{"key": "a", "operator": "Exists"}])
    second = shared.share([{"key": "a", "operator": "Exists"}])
    assert second is first and shared.hits == 1 and len(shared) == 1
    assert shared.share([{"key": "b", "operator": "Exists"}]) is not first


def test_values_python_calls_equal_are_apart_when_they_read_differently() -> None:
    shared = SharedValues()
    kept = [shared.share({"v": v}) for v in (1, True, 1.0, "1")]
    assert [type(k["v"]) for k in kept] == [int, bool, float, str]
    assert len({id(k) for k in kept}) == 4


def test_the_copy_is_made_only_for_a_value_not_seen_yet() -> None:
    shared = SharedValues()
    copies: list[object] = []

    def copied(value: object) -> object:
        copies.append(value)
        return copy.deepcopy(value)

    original = {"requests": {"cpu": "1"}}
    kept = shared.share(original, copied)
    again = shared.share({"requests": {"cpu": "1"}}, copied)
    assert kept is again and kept is not original and kept == original and len(copies) == 1


def test_a_kept_value_is_frozen_with_its_parts_until_nothing_holds_it() -> None:
    shared = SharedValues()
    held = shared.share({"containers": [{"name": "main"}], "tolerations": []})
    parts = [held["containers"], held["tolerations"]]
    assert is_frozen(held) and all(is_frozen(p) for p in parts)
    promised = len(frozen._FROZEN)
    shared.share([{"name": "gone"}])  # held by nothing but the table: its list and its map promised
    assert len(frozen._FROZEN) == promised + 2
    shared._sweep()
    assert len(shared) == 1 and len(frozen._FROZEN) == promised  # forgotten, and no longer promised
    assert shared.share({"containers": [{"name": "main"}], "tolerations": []}) is held
    assert is_frozen(held) and all(is_frozen(p) for p in parts)


def test_the_table_is_swept_as_it_grows() -> None:
    shared = SharedValues()
    for i in range(3 * shared_values._FIRST_SWEEP):
        shared.share([i])  # each dropped at once
    assert len(shared) < shared_values._FIRST_SWEEP


def test_what_marshal_cannot_write_is_copied_and_not_kept() -> None:
    shared = SharedValues()
    odd = {"when": object()}
    out = shared.share(odd, dict)
    assert out == odd and out is not odd and len(shared) == 0 and not is_frozen(out)


def test_a_value_whose_parts_pods_still_hold_is_kept() -> None:
    shared = SharedValues()
    # A pod's spec is a map of its own holding the shared spec's parts (informer._pod_spec), not the map.
    pod_spec = dict(shared.share({"containers": [{"name": "main"}], "schedulerName": "tessera"}))
    shared._sweep()
    assert len(shared) == 1 and is_frozen(pod_spec["containers"])
    assert (
        shared.share({"containers": [{"name": "main"}], "schedulerName": "tessera"})["containers"]
        is (pod_spec["containers"])
    )
