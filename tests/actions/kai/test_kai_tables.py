"""KAI Scheduler's action test tables, ported: every case named after the KAI test it comes from.

Each case runs the one action its KAI test runs, for one cycle, on the simulated cluster, and checks every
job's status (and node, where KAI's table names one). Cases where Tessera decides otherwise on purpose are
listed in `DIFFERS` with the reason (docs/differences-from-kai.md); they are strict xfails, so a change
that makes one agree is noticed. Cases of features Tessera does not have are in `cases/not_ported.yaml`.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.actions.kai.differs import DIFFERS
from tests.actions.kai.tables import PLACED, build, load_cases, outcome

CASES = load_cases()


def _param(case: dict[str, Any]) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=DIFFERS[case["kai"]])] if case["kai"] in DIFFERS else []
    return pytest.param(case, id=case["kai"], marks=marks)


def _node_checked(want: dict[str, Any]) -> bool:
    """KAI's table names a node for a pending task when its test wrote one on the task: nothing to check."""
    return "node" in want and want["status"] != "Pending"


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_kai_case(case: dict[str, Any]) -> None:
    sim, sched, members, at = build(case)
    sim.advance(at)
    sched.run_cycle()
    states = {j["name"]: [t["state"] for t in j["tasks"]] for j in case["jobs"]}
    got: dict[str, list[tuple[str, str | None]]] = {
        job: [outcome(sim, sched, key, was) for key, was in zip(keys, states[job], strict=True)]
        for job, keys in members.items()
    }
    wrong = []
    for job, want in case["expect"].items():
        status = "Bound" if want["status"] in PLACED else want["status"]
        if status == "Running" and all(s == "Pending" for s in states[job]):
            status = "Bound"  # KAI's harness shows a job allocated by `allocate` as running
        for i, (st, node) in enumerate(got[job]):
            if st != status or (_node_checked(want) and node != want["node"]):
                wrong.append(
                    f"{job}-{i}: {st} on {node}, KAI: {want['status']} on {want.get('node', 'any node')}"
                )
    # Per task: a job's tasks are alike, so KAI's list for them is compared as a whole, in any order.
    per_job: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for task, want in (case.get("expect_tasks") or {}).items():
        job, _, index = task.rpartition("-")
        if job in got and index.isdigit():  # else no task of that name: KAI's harness checks nothing either
            per_job.setdefault(job, []).append((int(index), want))
    for job, wants in per_job.items():
        mine = [got[job][i] for i, _ in wants]
        if not _matches(mine, [w for _, w in wants]):
            kai = [(w["status"], w.get("node") if _node_checked(w) else None) for _, w in wants]
            wrong.append(f"{job}: {mine}, KAI: {kai}")
    assert not wrong, "\n".join(wrong)


def _matches(mine: list[tuple[str, str | None]], wants: list[dict[str, Any]]) -> bool:
    """Whether the tasks' outcomes are KAI's in some order (those KAI names a node for matched first)."""
    left = list(mine)
    for want in sorted(wants, key=lambda w: not _node_checked(w)):
        status = "Bound" if want["status"] in PLACED else want["status"]
        hit = next(
            (g for g in left if g[0] == status and (not _node_checked(want) or g[1] == want["node"])), None
        )
        if hit is None:
            return False
        left.remove(hit)
    return True


def test_the_tables_are_all_here() -> None:
    # 180 action cases, 10 of the minruntime plugin
    assert len(CASES) == 190 and len({c["kai"] for c in CASES}) == len(CASES)
    assert set(DIFFERS) <= {c["kai"] for c in CASES}
