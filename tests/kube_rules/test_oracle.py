"""Property: on random clusters, Tessera's feasible nodes for a pod are exactly kube-scheduler's.

kube-scheduler's answer comes from its own code: `sched-oracle` runs the default profile's PreFilter and
Filter plugins of k8s.io/kubernetes (the release the control plane is built from) through the framework
runtime, on the same objects (scheduler/sandbox/sched_oracle.py). Clusters and pods carry every field
those plugins read (tests/kube_rules/clusters.py): resources of every kind with sidecars, init
containers and overhead; `pods` allocatable; taints of every effect and tolerations; cordoned nodes; node
selectors and required node affinity with every operator and `matchFields`; host ports; required pod
affinity and anti-affinity with namespaces and namespace selectors, against pods that have their own;
topology spread with `minDomains`, the node policies and `matchLabelKeys`.

CI runs `TESSERA_ORACLE_EXAMPLES` cases (default 300, about a minute); a long run (any count works; the
counts land in the report):

    TESSERA_ORACLE_EXAMPLES=10000 TESSERA_ORACLE_REPORT=oracle.json \\
        python -m pytest -q -p no:cacheprovider --timeout=0 tests/kube_rules/test_oracle.py
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from scheduler.sandbox.sched_oracle import OracleMissing, SchedOracle, find
from tests.kube_rules.clusters import Cluster, Obj, clusters, namespace_objects, tessera_feasible

EXAMPLES = int(os.environ.get("TESSERA_ORACLE_EXAMPLES", "300"))
STATS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def oracle() -> Iterator[SchedOracle]:
    try:
        binary = find(build_if_missing=shutil.which("go") is not None)
    except OracleMissing as exc:
        if os.environ.get("CI") or os.environ.get("TESSERA_REQUIRE_CONTROL_PLANE"):
            pytest.fail(f"kube-scheduler oracle: {exc}", pytrace=False)
        pytest.skip(f"kube-scheduler oracle: {exc}")
    with SchedOracle(binary) as o:
        yield o
    path = os.environ.get("TESSERA_ORACLE_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"examples": EXAMPLES, **dict(sorted(STATS.items()))}, f, indent=2)


def check(oracle: SchedOracle, cluster: Cluster, pod: Obj) -> None:
    verdict = oracle.evaluate(
        pod, cluster.nodes, cluster.pods, namespaces=cluster.namespaces, pvs=cluster.pvs, pvcs=cluster.pvcs,
        storage_classes=cluster.storage_classes,
    )  # fmt: skip
    ours, errors = tessera_feasible(cluster, pod)
    assert not errors, errors  # the generator only writes objects Tessera can use
    theirs = set(verdict.feasible)
    detail = {n: verdict.filtered.get(n) for n in sorted(ours ^ theirs)}
    assert ours == theirs, f"Tessera {sorted(ours)}, kube-scheduler {sorted(theirs)}: {detail}"
    STATS["cases"] += 1
    STATS["nodes"] += len(cluster.nodes)
    STATS["feasible_nodes"] += len(theirs)
    STATS["cases_with_no_feasible_node"] += not theirs
    if verdict.pre_filter is not None:
        STATS[f"rejected_by.{verdict.pre_filter[0]} (PreFilter)"] += 1
    for plugin, _ in verdict.filtered.values():
        STATS[f"nodes_rejected_by.{plugin}"] += 1


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(clusters())
def test_tessera_finds_the_nodes_kube_scheduler_finds(oracle: SchedOracle, case: tuple[Cluster, Obj]) -> None:
    cluster, pod = case
    check(oracle, cluster, pod)


# Named cases: the corners each rule has, checked against the oracle every run (the random cases reach
# them too, rarely: these would survive a wrong comparison or a forgotten branch in 300 random cases).
def _node(name: str, zone: str | None = "a", taints: list[Obj] | None = None, **labels: str) -> Obj:
    lab = {"kubernetes.io/hostname": name, **labels}
    if zone:
        lab["topology.kubernetes.io/zone"] = zone
    alloc = {"cpu": "4", "memory": "4Gi", "pods": "110"}
    return {"metadata": {"name": name, "labels": lab}, "spec": {"taints": taints or []},
            "status": {"allocatable": alloc}}  # fmt: skip


def _pod(name: str, node: str | None = None, ns: str = "default", app: str = "web", **spec: Any) -> Obj:
    p: Obj = {"metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
              "spec": {"containers": [{"name": "c", "image": "x"}], **spec}}  # fmt: skip
    if node:
        p["spec"]["nodeName"] = node
        p["status"] = {"phase": "Running"}
    return p


def _spread(key: str, selector: Obj, **extra: Any) -> list[Obj]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector,
            **extra,
        }
    ]


ZONE = "topology.kubernetes.io/zone"
WEB = {"matchLabels": {"app": "web"}}
SELF_AFFINE = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": WEB, "topologyKey": ZONE}]}}  # fmt: skip
NAMED: dict[str, tuple[list[Obj], list[Obj], Obj]] = {
    "Gt is strictly greater": (
        [_node("n0", gpus="4"), _node("n1", gpus="8")],
        [],
        _pod(
            "p",
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]}
                        ]
                    }
                }
            },
        ),
    ),
    "fewer domains than minDomains make the smallest count 0": (
        [_node("n0", "a"), _node("n1", "b")],
        [_pod("e0", "n0"), _pod("e1", "n1")],
        _pod("p", topologySpreadConstraints=_spread(ZONE, WEB, minDomains=3)),
    ),
    "an empty spread selector counts no pod": (
        [_node("n0", "a"), _node("n1", "b")],
        [_pod("e0", "n0"), _pod("e1", "n0")],
        _pod("p", topologySpreadConstraints=_spread(ZONE, {})),
    ),
    "the first pod of a self-affine group goes where the key is": (
        [_node("n0", "a"), _node("n1", None)],
        [_pod("e0", "n0", app="db")],
        _pod("p", affinity=SELF_AFFINE),
    ),
    "affinity follows the pods that match every term": (
        [_node("n0", "a"), _node("n1", "b")],
        [_pod("e0", "n1")],
        _pod("p", affinity=SELF_AFFINE),
    ),
    "an existing pod's anti-affinity reaches the namespaces its selector picks": (
        [_node("n0", "a"), _node("n1", "b")],
        [
            _pod(
                "e0",
                "n0",
                ns="team-b",
                app="db",
                affinity={
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": WEB,
                                "topologyKey": ZONE,
                                "namespaceSelector": {"matchLabels": {"env": "prod"}},
                            }
                        ]
                    }
                },
            )
        ],
        _pod("p", ns="team-a"),
    ),
    "a tainted node's domain is not counted when the taint policy is Honor": (
        [_node("n0", "a"), _node("n1", "b", taints=[{"key": "k", "effect": "NoSchedule"}]), _node("n2", "c")],
        [_pod("e0", "n0"), _pod("e1", "n2")],
        _pod("p", topologySpreadConstraints=_spread(ZONE, WEB, nodeTaintsPolicy="Honor")),
    ),
    "a cordoned node's domain counts for spread": (
        [_node("n0", "a"), {**_node("n1", "b"), "spec": {"unschedulable": True}}],
        [_pod("e0", "n0")],
        _pod("p", topologySpreadConstraints=_spread(ZONE, WEB)),
    ),
    "a host port on 0.0.0.0 conflicts with the same port on one address": (
        [_node("n0"), _node("n1")],
        [
            _pod(
                "e0",
                "n0",
                containers=[
                    {
                        "name": "c",
                        "image": "x",
                        "ports": [{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}],
                    }
                ],
            )
        ],
        _pod(
            "p", containers=[{"name": "c", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}]}]
        ),
    ),
    "an init container runs next to the sidecars started before it": (
        [_node("n0"), _node("n1")],
        [],
        _pod(
            "p",
            containers=[{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
            initContainers=[
                {
                    "name": "s",
                    "image": "x",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "2"}},
                },
                {"name": "i", "image": "x", "resources": {"requests": {"cpu": "2500m"}}},
            ],
        ),
    ),
}


def _class(
    name: str, provisioner: str = "csi.example.com", mode: str = "WaitForFirstConsumer", **kw: Any
) -> Obj:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": provisioner, "volumeBindingMode": mode, **kw}  # fmt: skip


def _pv(name: str, cls: str, host: str | None = None, modes: tuple[str, ...] = ("ReadWriteOnce",),
        claim: str | None = None, labels: dict[str, str] | None = None) -> Obj:  # fmt: skip
    pv: Obj = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": labels or {}},
               "spec": {"capacity": {"storage": "10Gi"}, "accessModes": list(modes), "storageClassName": cls},
               "status": {"phase": "Available"}}  # fmt: skip
    if host:
        pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}  # fmt: skip
    if claim:
        pv["spec"]["claimRef"] = {"namespace": "default", "name": claim}
    return pv


def _pvc(name: str, cls: str, volume: str | None = None, modes: tuple[str, ...] = ("ReadWriteOnce",),
         **annotations: str) -> Obj:  # fmt: skip
    pvc: Obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations)},
                "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": "1Gi"}},
                         "storageClassName": cls}}  # fmt: skip
    if volume:
        pvc["spec"]["volumeName"] = volume
        pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
    return pvc


CLAIMING = _pod("p", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}])
LOCAL, WFFC = _class("local", "kubernetes.io/no-provisioner"), _class("wffc")
ZONAL = _class("zonal", allowedTopologies=[{"matchLabelExpressions": [{"key": ZONE, "values": ["a", "b"]}]}])
THREE = [_node("n0", "a"), _node("n1", "b"), _node("n2", "c")]
SELECTED = {"volume.kubernetes.io/selected-node": "n1"}
VOLUMES: dict[str, tuple[list[Obj], list[Obj], list[Obj]]] = {  # name: (classes, volumes, claims)
    "a claim selected for a node takes that node": ([WFFC], [], [_pvc("data", "wffc", **SELECTED)]),
    "a claim selected for a node its class may not provision on": (
        [ZONAL], [], [_pvc("data", "zonal", **{"volume.kubernetes.io/selected-node": "n2"})],
    ),

    "a volume pre-bound to the claim is the only one it may take": (
        [LOCAL], [_pv("mine", "local", "n0", claim="data"), _pv("other", "local", "n1")], [_pvc("data", "local")],
    ),
    "a class provisions in its allowed topologies only": ([ZONAL], [], [_pvc("data", "zonal")]),
    "a volume must have every access mode the claim asks for": (
        [LOCAL], [_pv("ro", "local", "n0"), _pv("rw", "local", "n1", modes=("ReadWriteOnce", "ReadWriteMany"))],
        [_pvc("data", "local", modes=("ReadWriteMany",))],
    ),
    "a bound volume's node affinity": ([LOCAL], [_pv("pv", "local", "n2", claim="data")], [_pvc("data", "local", "pv")]),
    "a claim bound to a volume that does not exist": ([LOCAL], [], [_pvc("data", "local", "gone")]),
    "an unbound claim of an Immediate class waits for its volume": (
        [_class("fast", mode="Immediate")], [], [_pvc("data", "fast")],
    ),
    "a bound volume's zone label (VolumeZone)": (
        [WFFC], [_pv("pv", "wffc", claim="data", labels={ZONE: "a__b"})], [_pvc("data", "wffc", "pv")],
    ),
    "a claim that does not exist": ([WFFC], [], []),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_cases_as_kube_scheduler_decides_them(oracle: SchedOracle, name: str) -> None:
    nodes, pods, pod = NAMED[name]
    check(oracle, Cluster(nodes, pods, namespace_objects()), pod)


@pytest.mark.parametrize("name", sorted(VOLUMES))
def test_volume_cases_as_kube_scheduler_decides_them(oracle: SchedOracle, name: str) -> None:
    classes, pvs, pvcs = VOLUMES[name]
    cluster = Cluster([*THREE, _node("n3", None)], [], namespace_objects(), pvs, pvcs, classes)
    check(oracle, cluster, CLAIMING)


def test_the_bench_check_finds_a_pod_bound_against_the_rules(oracle: SchedOracle) -> None:
    """`bench e2e --affinity` judges each bound pod against those bound before it: two replicas of an
    anti-affine Deployment on one node are one pod too many (the first was fine where it was)."""
    from scheduler.bench.e2e.oracle_check import check_bound

    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": WEB, "topologyKey": "kubernetes.io/hostname"}]}}  # fmt: skip
    pods = [_pod(f"pod-{i}", node, affinity=anti) for i, node in enumerate(["n0", "n1", "n0"])]
    report = check_bound(pods, {f"pod-{i}": float(i) for i in range(3)}, THREE, namespace_objects())
    assert report["checked"] == 3 and report["feasible"] == 2, report
    assert report["infeasible"][0].startswith("pod-2 on n0: InterPodAffinity"), report
