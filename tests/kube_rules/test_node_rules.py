"""kube-scheduler's node filters as Tessera applies them: NodeUnschedulable, TaintToleration (NoSchedule and
NoExecute filter, PreferNoSchedule does not), NodeAffinity (every operator, `matchFields`), NodePorts, and
scheduling gates. The oracle test (test_oracle.py) checks the same against kube-scheduler's own plugins on
random clusters; these name the cases."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.model.parse import parse_node, parse_pod
from scheduler.model.types import Placement
from scheduler.placement import explain_unschedulable, feasible
from scheduler.state import ClusterState, demand_for
from scheduler.state.backend import get_namespace
from tests.framework.helpers import A100, cluster, node, phase, pod, podgroup, queue, run


def _node(
    name: str, labels: dict[str, str] | None = None, taints: list[dict] | None = None, **spec: Any
) -> dict:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], **spec},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}},
    }


def _pod(**spec: Any) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x"}], **spec}}  # fmt: skip


def _feasible(
    backend: str, nodes: list[dict], pod_obj: dict, placed: list[tuple[str, dict]] = ()
) -> list[str]:
    s = ClusterState(get_namespace(backend), capacity=2)
    for n in nodes:
        s.add_node(parse_node(n))
    for name, other in placed:
        p = parse_pod(other)
        row = s.row_of(name)
        assert row is not None
        s.place(Placement(node=row, gpus=(), cpu_milli=0, memory_mib=0, ports=p.constraints.host_ports))
    info = parse_pod(pod_obj)
    assert info.error is None, info.error
    mask, _ = feasible(s, demand_for(info))
    return [str(s.node_names[i]) for i in range(s.num_rows) if bool(mask[i])]


BACKENDS = ["numpy", "strict"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cordoned_node_takes_only_pods_that_tolerate_it(backend: str) -> None:
    nodes = [_node("up"), _node("cordoned", unschedulable=True)]
    assert _feasible(backend, nodes, _pod()) == ["up"]
    tolerating = _pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                    "effect": "NoSchedule"}])  # fmt: skip
    assert _feasible(backend, nodes, tolerating) == ["up", "cordoned"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_schedule_and_no_execute_taints_filter_prefer_no_schedule_does_not(backend: str) -> None:
    nodes = [
        _node("noexec", taints=[{"key": "gpu", "value": "broken", "effect": "NoExecute"}]),
        _node("nosched", taints=[{"key": "team", "value": "a", "effect": "NoSchedule"}]),
        _node("prefer", taints=[{"key": "spot", "effect": "PreferNoSchedule"}]),
    ]
    assert _feasible(backend, nodes, _pod()) == ["prefer"]
    t = _pod(tolerations=[{"key": "team", "operator": "Equal", "value": "a"}])
    assert _feasible(backend, nodes, t) == ["nosched", "prefer"]
    assert _feasible(backend, nodes, _pod(tolerations=[{"operator": "Exists"}])) == [
        "noexec",
        "nosched",
        "prefer",
    ]
    wrong_effect = _pod(tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])
    assert _feasible(backend, nodes, wrong_effect) == ["prefer"]


def _required(*terms: dict) -> dict:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def _expr(key: str, op: str, *values: str) -> dict:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("terms", "want"),
    [
        ([{"matchExpressions": [_expr("zone", "In", "a", "b")]}], ["n1", "n2"]),
        ([{"matchExpressions": [_expr("zone", "NotIn", "a")]}], ["n2", "n3"]),  # n3 has no zone: NotIn holds
        ([{"matchExpressions": [_expr("gpus", "Exists")]}], ["n1", "n2"]),
        ([{"matchExpressions": [_expr("gpus", "DoesNotExist")]}], ["n3"]),
        ([{"matchExpressions": [_expr("gpus", "Gt", "4")]}], ["n2"]),
        ([{"matchExpressions": [_expr("gpus", "Lt", "8")]}], ["n1"]),
        ([{"matchExpressions": [_expr("gpus", "Gt", "x")]}], []),  # Kubernetes cannot parse it: no node
        ([{"matchFields": [_expr("metadata.name", "In", "n3")]}], ["n3"]),
        ([{"matchFields": [_expr("metadata.name", "NotIn", "n3")]}], ["n1", "n2"]),
        # OR of terms, AND inside one
        (
            [
                {"matchExpressions": [_expr("zone", "In", "a"), _expr("gpus", "Gt", "4")]},
                {"matchFields": [_expr("metadata.name", "In", "n3")]},
            ],
            ["n3"],
        ),
        (
            [
                {"matchExpressions": [_expr("zone", "In", "a")]},
                {"matchExpressions": [_expr("gpus", "Gt", "4")]},
            ],
            ["n1", "n2"],
        ),
        ([], []),  # no term: no node
        ([{}], []),  # an empty term selects nothing
    ],
)
def test_required_node_affinity_with_every_operator(backend: str, terms: list[dict], want: list[str]) -> None:
    nodes = [_node("n1", {"zone": "a", "gpus": "4"}), _node("n2", {"zone": "b", "gpus": "08"}), _node("n3")]
    assert _feasible(backend, nodes, _pod(affinity=_required(*terms))) == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_ports_conflict_as_kube_scheduler_says(backend: str) -> None:
    def ported(port: int, ip: str = "", protocol: str = "TCP") -> dict:
        return _pod(containers=[{"name": "c", "image": "x", "ports": [
            {"containerPort": 80, "hostPort": port, "hostIP": ip, "protocol": protocol}]}])  # fmt: skip

    nodes = [_node("n1"), _node("n2")]
    placed = [("n1", ported(8080, "10.0.0.1"))]
    assert _feasible(backend, nodes, ported(8080), placed) == ["n2"]  # 0.0.0.0 conflicts with any address
    assert _feasible(backend, nodes, ported(8080, "10.0.0.2"), placed) == ["n1", "n2"]  # another address
    assert _feasible(backend, nodes, ported(8080, "10.0.0.1"), placed) == ["n2"]
    assert _feasible(backend, nodes, ported(8080, "", "UDP"), placed) == ["n1", "n2"]  # another protocol
    wildcard = [("n2", ported(9090))]
    assert _feasible(backend, nodes, ported(9090, "10.0.0.1"), wildcard) == [
        "n1"
    ]  # 0.0.0.0 bound: any address
    host_net = _pod(
        hostNetwork=True, containers=[{"name": "c", "image": "x", "ports": [{"containerPort": 9090}]}]
    )
    assert _feasible(backend, nodes, host_net, wildcard) == [
        "n1"
    ]  # hostNetwork: container ports are host ports


def test_the_gpu_model_named_by_affinity_is_the_pods_model() -> None:
    p = parse_pod(
        _pod(
            affinity=_required({"matchExpressions": [_expr("nvidia.com/gpu.product", "In", "A100", "H100")]})
        )
    )
    assert p.gpu_models == frozenset({"A100", "H100"})


def test_the_reason_names_each_filter_in_kube_schedulers_words() -> None:
    s = ClusterState(get_namespace("numpy"), capacity=4)
    for n in [_node("c", unschedulable=True), _node("t", taints=[{"key": "k", "effect": "NoSchedule"}]),
              _node("a", {"zone": "b"}), _node("ok", {"zone": "a"})]:  # fmt: skip
        s.add_node(parse_node(n))
    p = _pod(affinity=_required({"matchExpressions": [_expr("zone", "In", "a")]}))
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    info = parse_pod(p)
    s.place(Placement(node=3, gpus=(), cpu_milli=8000, memory_mib=0))

    msg = explain_unschedulable(s, demand_for(info))
    for part in ("1 node(s) were unschedulable", "1 node(s) had untolerated taint(s)",
                 "1 node(s) didn't match Pod's node affinity/selector", "1 short of CPU"):  # fmt: skip
        assert part in msg, msg
    assert "of 4 nodes" in msg


def test_a_pod_with_scheduling_gates_is_not_scheduled_until_they_are_removed() -> None:
    gated = pod("gated", "team", arrival_s=0, duration_s=60)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    sim, sched = cluster([node("n1", A100, 1, 32, 256), queue("team", None, 1), gated])
    run(sim, sched, cycles=2)
    assert phase(sim, "team/gated") == "Pending"
    assert sim.pods["team/gated"].reason == (
        "SchedulingGated",
        "waits for its scheduling gates: example.com/quota",
    )


def test_a_gang_waits_for_its_scheduling_gated_member() -> None:
    members = [
        pod(f"w{i}", "team", arrival_s=0, duration_s=60, gpus=1, annotations={"tessera.dev/pod-group": "job"})
        for i in range(2)
    ]
    members[1]["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    sim, sched = cluster([node("n1", A100, 4, 32, 256), queue("team", None, 4), podgroup("job", "team", "team", 2),
                          *members])  # fmt: skip
    run(sim, sched, cycles=2)
    assert phase(sim, "team/w0") == phase(sim, "team/w1") == "Pending"
    gated, waiting = sim.pods["team/w1"].reason, sim.pods["team/w0"].reason
    assert gated is not None and gated[0] == "SchedulingGated"
    assert waiting is not None and "team/w1 is invalid or scheduling-gated" in waiting[1], waiting
