"""Records frozen for the type checker (`model/frozen.py`): mypy refuses a write to one, they hash and
compare by their fields as frozen dataclasses do (a `PodInfo` by its uid), and a change is a new record."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mypy import api as mypy

from scheduler.api.gpu_request import GPURequest
from scheduler.cache.ledger import Holding, HoldKind, Owner
from scheduler.model.types import GPUShare, Placement, PodInfo

ROOT = Path(__file__).resolve().parents[2]


def test_the_type_checker_refuses_a_write(tmp_path: Path) -> None:
    snippet = tmp_path / "write.py"
    snippet.write_text(
        "from scheduler.model.frozen import frozen_for_the_checker\n\n\n"
        "@frozen_for_the_checker\nclass Record:\n    node: int\n\n\n"
        "def move(r: Record) -> Record:\n    r.node = 3\n    return Record(node=4)\n"
    )
    out, _, status = mypy.run(
        [str(snippet), "--no-error-summary", "--no-incremental", "--follow-imports=silent"]
    )
    assert status == 1 and ':10: error: Property "node" defined in "Record" is read-only' in out, out
    assert out.count("error") == 1  # building one is fine


def test_records_hash_and_compare_by_their_fields() -> None:
    share = GPUShare(slot=1, milli=500, mib=40_000)
    a = Placement(node=3, gpus=(share,), cpu_milli=1000, memory_mib=4096)
    b = Placement(node=3, gpus=(GPUShare(1, 500, 40_000),), cpu_milli=1000, memory_mib=4096)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != dataclasses.replace(a, node=4)
    owner = Owner("q", "pod:ns/p", False)
    h = Holding(HoldKind.BOUND, a, owner)
    assert {h: 1}[Holding(HoldKind.BOUND, b, Owner("q", "pod:ns/p", False))] == 1


def test_a_pod_hashes_by_its_uid_and_a_change_is_a_new_pod() -> None:
    pod = PodInfo("uid-1", "ns", "p", "q", 0, True, GPURequest())
    bound = dataclasses.replace(pod, node="n1")
    assert hash(pod) == hash(bound) and pod != bound and pod.node is None
