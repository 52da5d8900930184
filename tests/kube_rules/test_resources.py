"""The pod's whole request, as the kubelet computes it, against every resource a node has.

Sidecars (init containers with `restartPolicy: Always`) add up and stay; ordinary init containers run alone
next to the sidecars started before them; overhead is added; pod-level requests replace the containers'
total; a container's limit stands in for its missing request. Every resource a node advertises is checked
(`pods`, ephemeral-storage, hugepages, extended resources), and queues are charged the same request.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from scheduler.model.parse import parse_node, parse_pod, pod_resources
from scheduler.model.types import NodeInfo, Placement
from scheduler.placement import explain_unschedulable, feasible
from scheduler.state import ClusterState, PodDemand
from scheduler.state.backend import get_namespace
from scheduler.state.bulk import arrays_agree
from scheduler.state.cluster_state import OvercommitError
from tests.framework.helpers import A100, cluster, node, phase, pod, queue, run

GI = 1024**3


def _c(
    name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **kw: Any
) -> dict:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": name, "image": "x", "resources": res, **kw}


SIDECAR = {"restartPolicy": "Always"}


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        # app containers add up
        ({"containers": [_c("a", {"cpu": "1"}), _c("b", {"cpu": "500m"})]}, {"cpu": "1.5"}),
        # an init container larger than the app containers sets the request
        ({"containers": [_c("a", {"cpu": "1"})], "initContainers": [_c("i", {"cpu": "3"})]}, {"cpu": "3"}),
        # sidecars add up with the app containers (not max)
        (
            {"containers": [_c("a", {"cpu": "1"})], "initContainers": [_c("s", {"cpu": "2"}, **SIDECAR)]},
            {"cpu": "3"},
        ),
        # an init container after a sidecar runs next to it: 2 + 2.5 = 4.5 > 2 + 1
        (
            {
                "containers": [_c("a", {"cpu": "1"})],
                "initContainers": [_c("s", {"cpu": "2"}, **SIDECAR), _c("i", {"cpu": "2500m"})],
            },
            {"cpu": "4.5"},
        ),
        # ... but one before the sidecar runs alone: max(2.5, 1 + 2) = 3
        (
            {
                "containers": [_c("a", {"cpu": "1"})],
                "initContainers": [_c("i", {"cpu": "2500m"}), _c("s", {"cpu": "2"}, **SIDECAR)],
            },
            {"cpu": "3"},
        ),
        # a limit stands in for a missing request, per container
        (
            {"containers": [_c("a", {"cpu": "1"}), _c("b", None, {"cpu": "2", "memory": "1Gi"})]},
            {"cpu": "3", "memory": str(GI)},
        ),
        # overhead (the RuntimeClass's) is added
        (
            {"containers": [_c("a", {"cpu": "1"})], "overhead": {"cpu": "250m", "memory": "120Mi"}},
            {"cpu": "1.25", "memory": str(120 * 1024**2)},
        ),
        # pod-level requests replace the containers' total of that resource (not of the others)
        (
            {
                "containers": [_c("a", {"cpu": "1", "ephemeral-storage": "1Gi"})],
                "resources": {"requests": {"cpu": "4"}},
            },
            {"cpu": "4", "ephemeral-storage": str(GI)},
        ),
        # a pod-level limit stands in for a request no container makes
        (
            {"containers": [_c("a", {"cpu": "1"})], "resources": {"limits": {"cpu": "2", "memory": "2Gi"}}},
            {"cpu": "1", "memory": str(2 * GI)},
        ),
        # every resource follows the same rule
        (
            {
                "containers": [_c("a", {"ephemeral-storage": "10Gi", "example.com/fpga": "1"})],
                "initContainers": [_c("s", {"ephemeral-storage": "5Gi", "example.com/fpga": "1"}, **SIDECAR)],
            },
            {"ephemeral-storage": str(15 * GI), "example.com/fpga": "2"},
        ),
    ],
)
def test_pod_request_as_the_kubelet_computes_it(spec: dict, want: dict[str, str]) -> None:
    requests, _ = pod_resources(spec)
    assert requests == {k: Decimal(v) for k, v in want.items()}


def _pod(spec: dict) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def test_the_parsed_pod_carries_every_resource_in_the_schedulers_units() -> None:
    spec = {
        "containers": [
            _c("a", {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "800Gi", "hugepages-2Mi": "4Mi"})
        ],
        "initContainers": [_c("s", {"cpu": "1", "memory": "1Mi", "example.com/nic": "1"}, **SIDECAR)],
    }
    p = parse_pod(_pod(spec))
    assert p.error is None
    assert (p.cpu_milli, p.memory_mib) == (2000, 1025)
    assert p.scalars == (
        ("ephemeral-storage", 800 * GI),
        ("example.com/nic", 1),
        ("hugepages-2Mi", 4 * 1024**2),
    )


def test_an_unreadable_extended_resource_makes_the_pod_invalid_with_its_name() -> None:
    p = parse_pod(_pod({"containers": [_c("a", {"example.com/nic": "lots"})]}))
    assert p.error is not None and "example.com/nic" in p.error


def test_a_node_reads_pods_and_every_other_resource_and_rounds_memory_down() -> None:
    n = parse_node({
        "metadata": {"name": "n"},
        "status": {"allocatable": {"cpu": "4", "memory": "16283484Ki", "pods": "110",
                                   "ephemeral-storage": "500Gi", "example.com/nic": "2", "hugepages-1Gi": "0"}},
    })  # fmt: skip
    assert n.pods == 110 and n.memory_mib == 15901  # 16283484 KiB = 15901.8 MiB
    assert n.scalars == (("ephemeral-storage", 500 * GI), ("example.com/nic", 2), ("hugepages-1Gi", 0))
    assert parse_node({"metadata": {"name": "sim"}, "status": {"allocatable": {"cpu": "4"}}}).pods is None


@pytest.mark.parametrize("backend", ["numpy", "strict"])
def test_every_resource_is_a_column_checked_against_what_is_left(backend: str) -> None:
    s = ClusterState(get_namespace(backend), capacity=2)
    s.add_node(NodeInfo("small", 8000, 8192, pods=2, scalars=(("ephemeral-storage", 100 * GI),)))
    s.add_node(
        NodeInfo(
            "big", 8000, 8192, pods=110, scalars=(("ephemeral-storage", 500 * GI), ("example.com/nic", 1))
        )
    )

    def rows(d: PodDemand) -> list[str]:
        mask, _ = feasible(s, d)
        return [str(s.node_names[i]) for i in range(s.num_rows) if bool(mask[i])]

    assert rows(PodDemand(scalars=(("ephemeral-storage", 200 * GI),))) == ["big"]
    assert rows(PodDemand(scalars=(("ephemeral-storage", 800 * GI),))) == []
    assert rows(PodDemand(scalars=(("example.com/nic", 1),))) == ["big"]
    assert rows(PodDemand(scalars=(("example.com/unknown", 1),))) == []  # no node has it
    msg = explain_unschedulable(s, PodDemand(scalars=(("ephemeral-storage", 800 * GI),)))
    assert "2 Insufficient ephemeral-storage" in msg, msg
    # Two pods fill "small"'s pod slots; the third fits only on "big".
    held = []
    for _ in range(2):
        pl = Placement(node=0, gpus=(), cpu_milli=100, memory_mib=10, scalars=(("ephemeral-storage", GI),))
        s.place(pl)
        held.append(pl)
    assert rows(PodDemand()) == ["big"]
    assert "1 Too many pods" in explain_unschedulable(s, PodDemand(scalars=(("example.com/nic", 2),)))
    with pytest.raises(OvercommitError):
        s.place(Placement(node=0, gpus=(), cpu_milli=0, memory_mib=0))
    nic = Placement(node=1, gpus=(), cpu_milli=0, memory_mib=0, scalars=(("example.com/nic", 1),))
    s.place(nic)
    assert rows(PodDemand(scalars=(("example.com/nic", 1),))) == []
    assert arrays_agree(s, [*held, nic])
    # A node update keeps what its pods hold.
    s.update_node(NodeInfo("big", 8000, 8192, pods=110, scalars=(("example.com/nic", 3),)))
    assert int(s.free_scalar[1, s.scalars.get("example.com/nic")]) == 2
    assert int(s.free_pods[1]) == 109
    assert arrays_agree(s, [*held, nic])
    s.rollback(0)
    assert rows(PodDemand()) == ["small", "big"]
    assert arrays_agree(s, [])


def _sized_node(name: str, **allocatable: str) -> dict:
    n = node(name, A100, 0, 64, 256)
    n["status"]["capacity"].update(allocatable)
    return n


def test_115_replicas_on_4_nodes_of_110_pods_never_exceed_a_nodes_pod_slots() -> None:
    """The repro: a Deployment of 115 small pods went to one node under binpack (its `pods: 110`
    allocatable never read) and 5 failed OutOfpods at the kubelet."""
    nodes = [_sized_node(f"n{i}", pods="110") for i in range(4)]
    pods = [
        pod(f"web-{i}", "team", arrival_s=0, duration_s=600, cpu="10m", memory="16Mi") for i in range(115)
    ]
    sim, sched = cluster([*nodes, queue("team", None, 0), *pods], policy="binpack")
    run(sim, sched, cycles=2)
    per_node: dict[str, int] = {}
    for rec in sim.pods.values():
        assert rec.obj["spec"].get("nodeName"), rec.obj["metadata"]["name"]
        per_node[rec.obj["spec"]["nodeName"]] = per_node.get(rec.obj["spec"]["nodeName"], 0) + 1
    assert max(per_node.values()) == 110 and sum(per_node.values()) == 115


def test_a_pod_asking_more_ephemeral_storage_than_any_node_has_stays_pending_with_the_reason() -> None:
    nodes = [_sized_node(f"n{i}", **{"ephemeral-storage": "500Gi", "pods": "110"}) for i in range(2)]
    big = pod("vllm", "team", arrival_s=0, duration_s=600, cpu="1", memory="1Gi")
    big["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "800Gi"
    sim, sched = cluster([*nodes, queue("team", None, 0), big])
    run(sim, sched, cycles=2)
    assert phase(sim, "team/vllm") == "Pending"
    reason = sim.pods["team/vllm"].reason
    assert reason is not None and reason[0] == "Unschedulable"
    assert "2 Insufficient ephemeral-storage" in reason[1], reason


def test_a_queue_is_charged_the_pods_request_with_its_sidecars() -> None:
    """A queue with a CPU limit of 3 cores: a pod of 1 core with a 2-core sidecar asks for 3, so a second
    one is over the limit (charged as max(app, init) it would be 2 cores each, and both would run)."""
    team = queue("team", None, 0)
    team["spec"]["resources"]["cpu"] = {"quota": -1, "overQuotaWeight": 1, "limit": 3}
    pods = []
    for i in range(2):
        p = pod(f"p{i}", "team", arrival_s=0, duration_s=600, cpu="1", memory="1Gi")
        p["spec"]["initContainers"] = [_c("proxy", {"cpu": "2", "memory": "64Mi"}, **SIDECAR)]
        pods.append(p)
    sim, sched = cluster([_sized_node("n0", pods="110"), team, *pods])
    run(sim, sched, cycles=2)
    assert sorted(phase(sim, f"team/p{i}") for i in range(2)) == ["Pending", "Running"]
