"""A pod's claims through the real cycle on the simulated cluster: a StatefulSet next to its zonal or local
disk, and a claim that waits for the PV controller keeps its pod pending with kube-scheduler's reason."""

from __future__ import annotations

from typing import Any

from scheduler.model.constraints import NO_CONSTRAINTS
from scheduler.model.parse import parse_pod
from tests.framework.helpers import A100, cluster, node, phase, pod, queue, run
from tests.kube_rules.clusters import SERVICE_ACCOUNT_VOLUME

ZONE = "topology.kubernetes.io/zone"


def _nodes() -> list[dict[str, Any]]:
    out = []
    for i, zone in enumerate(["a", "b", "c"]):
        n = node(f"n{i}", A100, 0, 32, 256)
        n["metadata"]["labels"].update({"kubernetes.io/hostname": f"n{i}", ZONE: zone})
        out.append(n)
    return out


def _claiming(name: str, claim: str) -> dict[str, Any]:
    p = pod(name, "team", arrival_s=0, duration_s=600, cpu="1", memory="1Gi")
    p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return p


def _objects(claim_class: str, **claim_spec: Any) -> list[dict[str, Any]]:
    classes = [
        {"kind": "StorageClass", "metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
         "volumeBindingMode": "WaitForFirstConsumer"},
        {"kind": "StorageClass", "metadata": {"name": "fast"}, "provisioner": "csi.example.com",
         "volumeBindingMode": "Immediate"},
    ]  # fmt: skip
    pv = {"kind": "PersistentVolume", "metadata": {"name": "disk-b"},
          "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": ZONE, "operator": "In", "values": ["b"]}]}]}}},
          "status": {"phase": "Available"}}  # fmt: skip
    pvc = {"kind": "PersistentVolumeClaim", "metadata": {"name": "data-0", "namespace": "team"},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}},
                    "storageClassName": claim_class, **claim_spec}}  # fmt: skip
    return [*classes, pv, pvc]


def test_a_pod_goes_where_the_volume_it_may_take_is() -> None:
    sim, sched = cluster([*_nodes(), queue("team", None, 0), *_objects("local"), _claiming("db-0", "data-0")])
    run(sim, sched, cycles=2)
    assert sim.pods["team/db-0"].obj["spec"].get("nodeName") == "n1"  # zone b, where disk-b is


def test_a_claim_waiting_for_the_pv_controller_keeps_its_pod_pending_with_the_reason() -> None:
    sim, sched = cluster([*_nodes(), queue("team", None, 0), *_objects("fast"), _claiming("db-0", "data-0")])
    run(sim, sched, cycles=2)
    assert phase(sim, "team/db-0") == "Pending"
    reason = sim.pods["team/db-0"].reason
    assert reason is not None and "pod has unbound immediate PersistentVolumeClaims" in reason[1], reason


def test_a_missing_claim_keeps_its_pod_pending_with_the_reason() -> None:
    sim, sched = cluster([*_nodes(), queue("team", None, 0), _claiming("db-0", "nothing")])
    run(sim, sched, cycles=2)
    reason = sim.pods["team/db-0"].reason
    assert reason is not None and 'persistentvolumeclaim "nothing" not found' in reason[1], reason


def test_only_claims_among_a_pods_volumes_constrain_it() -> None:
    """Nearly every pod has volumes (its service account token, config maps, secrets, scratch space):
    none of those says where it may go; a claim does, whatever volumes come with it; volumes that are not
    maps make the pod invalid, as before."""
    p = pod("web", "team", arrival_s=0, duration_s=600, cpu="1")
    p["spec"]["volumes"] = [SERVICE_ACCOUNT_VOLUME, {"name": "cfg", "configMap": {"name": "c"}},
                            {"name": "tmp", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "s"}}]  # fmt: skip
    assert parse_pod(p).constraints == NO_CONSTRAINTS
    p["spec"]["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}})
    p["spec"]["volumes"].append({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    assert parse_pod(p).constraints.claims == ("data-0", "web-scratch")
    p["spec"]["volumes"] = [SERVICE_ACCOUNT_VOLUME, "data"]
    error = parse_pod(p).error
    assert error is not None and "volume" in error  # the pod is told; it is never placed as it is
