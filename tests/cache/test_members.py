"""The job index's member table (`Members`): a one-pod job kept as the pod itself must read exactly as a map
of its members would, whatever is added and removed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.gpu_request import GPURequest
from scheduler.cache.job_index import Members
from scheduler.model.types import PodInfo

JOBS = ["a", "b", "c"]
UIDS = ["u1", "u2", "u3", "u4"]


def _pod(uid: str, version: int) -> PodInfo:
    return PodInfo(uid=uid, namespace="ns", name=uid, queue="q", priority=version, preemptible=True,
                   request=GPURequest(kind="none"))  # fmt: skip


STEP = st.tuples(st.sampled_from(["add", "remove", "drop"]), st.sampled_from(JOBS), st.sampled_from(UIDS),
                 st.integers(0, 3))  # fmt: skip
ops = st.lists(STEP, max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_members_read_as_a_map_of_maps(steps: list[tuple[str, str, str, int]]) -> None:
    table = Members()
    model: dict[str, dict[str, PodInfo]] = {}
    for op, job, uid, version in steps:
        if op == "add":
            pod = _pod(uid, version)
            table.add(job, pod)
            model.setdefault(job, {})[uid] = pod
        elif op == "remove":
            table.remove(job, uid)
            if job in model:
                model[job].pop(uid, None)
        else:
            table.drop(job)
            model.pop(job, None)
        for key in JOBS:
            got = table.of(key)
            want = list(model.get(key, {}).values())
            assert [p.uid for p in got] == [p.uid for p in want]
            assert all(g is w for g, w in zip(got, want, strict=True))  # the newest version of each
        assert table.keys() == list(model)
