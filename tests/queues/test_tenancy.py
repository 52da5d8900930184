"""Which namespaces may use a queue (`Queue.spec.namespaces`, issue 27 finding 4), as the scheduler applies
it for clusters without the webhook: pods and PodGroups naming a queue their namespace may not use wait
with `InvalidQueue` and the reason; a parent's list bounds every queue under it. The webhook refuses the
same pods at admission (tests/webhook/test_webhook_tenants_apiserver.py)."""

from __future__ import annotations

from typing import Any

from scheduler.api.keys import POD_GROUP
from tests.framework.helpers import A100, cluster, node, phase, pod, podgroup, queue, run


def open_to(q: dict[str, Any], *namespaces: str) -> dict[str, Any]:
    q["spec"]["namespaces"] = list(namespaces)
    return q


def test_pods_of_other_namespaces_wait_told_why() -> None:
    org = open_to(queue("org-b", None, -1), "team-b", "team-b-dev")
    leaf = queue("b", "org-b", 2)
    theirs = pod("steal", "b", arrival_s=0, duration_s=100, gpus=1, namespace="team-a")
    ours = pod("train", "b", arrival_s=0, duration_s=100, gpus=1, namespace="team-b-dev")
    sim, _ = cluster([node("n1", A100, 4, 32, 128), org, leaf, theirs, ours])
    run(sim, _, cycles=2)
    assert phase(sim, "team-b-dev/train") == "Running"
    assert phase(sim, "team-a/steal") == "Pending"
    reason, message = sim.pods["team-a/steal"].reason or ("", "")
    assert reason == "InvalidQueue"
    assert (
        "namespace team-a may not use queue b (its parent org-b's spec.namespaces: team-b, team-b-dev)"
        in message
    )


def test_a_podgroup_naming_a_queue_closed_to_its_namespace_waits() -> None:
    closed = open_to(queue("b", None, 2), "team-b")
    members = [pod(f"g-{i}", "b", arrival_s=0, duration_s=100, gpus=1, namespace="team-a",
                   annotations={POD_GROUP: "g"}) for i in range(2)]  # fmt: skip
    sim, sched = cluster([node("n1", A100, 4, 32, 128), closed, podgroup("g", "team-a", "b", 2), *members])
    run(sim, sched, cycles=2)
    for i in range(2):
        assert phase(sim, f"team-a/g-{i}") == "Pending"
        assert (sim.pods[f"team-a/g-{i}"].reason or ("",))[0] == "InvalidQueue"
