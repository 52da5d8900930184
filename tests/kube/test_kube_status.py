"""Queue and PodGroup status, and the pending pods' PodScheduled condition, on the real API server with the
chart's CRDs: status subresources, schema validation, defaults and printer columns are the server's own.

Two bugs are pinned here: a status overwritten by someone else was never repaired (the writers compared
with what they last wrote, not with the object), and a PodGroup kept `Running, running: 4` after all its
pods were deleted (the cycle reports only groups that still have pods).
"""

from __future__ import annotations

import json
import ssl
import urllib.request

import pytest
from kubernetes import client

from scheduler.api.keys import GROUP, VERSION
from scheduler.api.meta import Condition
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.queue import QueueStatus
from scheduler.kube.status import PodGroupStatusWriter, QueueStatusWriter
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver

UNLIMITED = {"quota": -1, "limit": -1}


def test_writers_write_only_what_differs_from_the_object(scene: Scene, fault_proxy: FaultProxy) -> None:
    custom = client.CustomObjectsApi(fault_proxy.client(scene.tessera.scheduler_token))
    scene.podgroup("g", {"minMember": 2})
    scene.queue("q-writers")
    group = PodGroupStatusWriter(custom, lambda key: scene.get("podgroups", key.split("/")[1]))
    why = Condition(type="Schedulable", status="False", reason="GangUnschedulable",
                    message="gang needs 2 pods with 1 GPU each; only 1 fits")  # fmt: skip
    pending = PodGroupStatus(phase="Unschedulable", running=0, conditions=[why])
    assert group.write(scene.ns, "g", pending)
    assert not group.write(scene.ns, "g", pending.model_copy(deep=True))  # the object already says it
    status = scene.get("podgroups", "g")["status"]
    assert status["phase"] == "Unschedulable" and status["conditions"][0]["reason"] == "GangUnschedulable"
    since = status["conditions"][0]["lastTransitionTime"]
    assert since and "only 1 fits" in status["conditions"][0]["message"]
    moved = why.model_copy(update={"message": "gang needs 2 pods with 1 GPU each; none fits"})
    assert group.write(scene.ns, "g", PodGroupStatus(phase="Unschedulable", conditions=[moved]))
    assert (
        scene.get("podgroups", "g")["status"]["conditions"][0]["lastTransitionTime"] == since
    )  # same status
    queues = QueueStatusWriter(custom, lambda name: scene.get("queues", name, namespaced=False))
    qstatus = QueueStatus(allocated={"gpu": 1.5, "cpu": 2}, requested={"gpu": 3}, fair_share={"gpu": 2})
    assert queues.write("q-writers", qstatus)
    assert not queues.write("q-writers", qstatus.model_copy())
    smaller = QueueStatus(allocated={"gpu": 1}, requested={"gpu": 3}, fair_share={"gpu": 2})
    assert queues.write("q-writers", smaller)
    # Replaced whole: a key the new status no longer has is gone (a merge patch would have kept cpu: 2).
    assert scene.get("queues", "q-writers", namespaced=False)["status"] == {
        "allocated": {"gpu": 1}, "requested": {"gpu": 3}, "fairShare": {"gpu": 2},
    }  # fmt: skip
    assert len(fault_proxy.requests_matching("PATCH", "/status$")) == 4


def test_a_status_overwritten_by_someone_else_is_repaired(scene: Scene) -> None:
    scene.node("gpu-1", gpus=2)
    scene.queue("team-repair", {"resources": {"gpu": {"quota": 2, "limit": -1}, "cpu": UNLIMITED,
                                              "memory": UNLIMITED}})  # fmt: skip
    scene.podgroup("gang", {"minMember": 2, "queue": "team-repair"})
    scene.kubelet()
    scene.scheduler()
    for i in range(2):
        scene.create_pod(pod_body(f"w-{i}", labels={"tessera.dev/queue": "team-repair"},
                                  annotations={"tessera.dev/pod-group": "gang"}, limits={"nvidia.com/gpu": "1"}))  # fmt: skip

    def queue_gpus() -> float | None:
        return (
            (scene.get("queues", "team-repair", namespaced=False).get("status") or {})
            .get("allocated", {})
            .get("gpu")
        )

    def group_status() -> dict[str, object]:
        return dict(scene.get("podgroups", "gang").get("status") or {})

    wait_until(lambda: queue_gpus() == 2)
    wait_until(lambda: group_status().get("phase") == "Running" and group_status().get("running") == 2)
    # Someone (a person with kubectl, another controller) writes over what the scheduler wrote.
    scene.custom.patch_cluster_custom_object_status(GROUP, VERSION, "queues", "team-repair",
                                                    {"status": {"allocated": {"gpu": 99}}})  # fmt: skip
    scene.custom.patch_namespaced_custom_object_status(GROUP, VERSION, scene.ns, "podgroups", "gang",
                                                       {"status": {"phase": "Pending", "running": 0}})  # fmt: skip
    wait_until(lambda: queue_gpus() == 2)
    wait_until(lambda: group_status().get("phase") == "Running" and group_status().get("running") == 2)


def test_podgroup_status_follows_its_pods_when_they_are_deleted(scene: Scene) -> None:
    scene.node("gpu-1", gpus=4)
    scene.podgroup("ddp", {"minMember": 4})
    scene.kubelet()
    scene.scheduler()
    for i in range(4):
        scene.create_pod(pod_body(f"ddp-{i}", annotations={"tessera.dev/pod-group": "ddp"},
                                  limits={"nvidia.com/gpu": "1"}))  # fmt: skip

    def status() -> dict[str, object]:
        return dict(scene.get("podgroups", "ddp").get("status") or {})

    wait_until(lambda: (status().get("phase"), status().get("running")) == ("Running", 4))
    scene.core.delete_collection_namespaced_pod(scene.ns, body=client.V1DeleteOptions(grace_period_seconds=0))
    wait_until(lambda: not scene.pods())
    wait_until(
        lambda: (
            (status().get("phase"), status().get("running"), status().get("conditions")) == ("Pending", 0, [])
        )
    )


def test_the_crds_validate_and_default_as_the_server_runs_them(scene: Scene) -> None:
    with pytest.raises(client.ApiException) as refused:
        scene.podgroup("zero", {"minMember": 0})
    assert refused.value.status == 422 and "spec.minMember" in json.loads(refused.value.body)["message"]
    defaulted = scene.podgroup("bare", {})
    assert defaulted["spec"] == {"minMember": 1, "queue": "default", "staleGraceSeconds": 60}
    with pytest.raises(client.ApiException) as bad_status:
        scene.custom.patch_namespaced_custom_object_status(GROUP, VERSION, scene.ns, "podgroups", "bare",
                                                           {"status": {"phase": "Sleeping"}})  # fmt: skip
    assert (
        bad_status.value.status == 422 and "Unsupported value" in json.loads(bad_status.value.body)["message"]
    )
    # The status subresource: a write to the main resource does not touch status, and the other way round.
    scene.custom.patch_namespaced_custom_object(GROUP, VERSION, scene.ns, "podgroups", "bare",
                                                {"status": {"phase": "Running"}, "spec": {"minMember": 3}})  # fmt: skip
    stored = scene.get("podgroups", "bare")
    assert stored["spec"]["minMember"] == 3 and (stored.get("status") or {}).get("phase") != "Running"


def test_printer_columns_and_table_output(scene: Scene) -> None:
    scene.queue("team-cols", {"resources": {"gpu": {"quota": 4, "limit": 8}}})
    scene.custom.patch_cluster_custom_object_status(GROUP, VERSION, "queues", "team-cols",
                                                    {"status": {"allocated": {"gpu": 1.5}, "fairShare": {"gpu": 4}}})  # fmt: skip
    scene.podgroup("ddp", {"minMember": 2, "queue": "team-cols"})
    scene.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, scene.ns, "podgroups", "ddp", {"status": {"phase": "Pending", "running": 1}}
    )
    out = scene.cp.kubectl("get", "queue", "team-cols").stdout.splitlines()
    header, row = out[0].split(), out[1].split()
    assert header[:2] == ["NAME", "PARENT"] and "ALLOCATED" in header and row[0] == "team-cols"
    assert "1.5" in row and "4" in row and "8" in row
    out = scene.cp.kubectl("get", "podgroups", "-n", scene.ns).stdout.splitlines()
    assert out[0].split()[:5] == ["NAME", "MINMEMBER", "RUNNING", "QUEUE", "PHASE"]
    assert out[1].split()[:5] == ["ddp", "2", "1", "team-cols", "Pending"]
    # The Table the server renders for any client that asks for it (kubectl does).
    tls = ssl.create_default_context(cafile=str(scene.cp.ca_file))
    tls.load_cert_chain(str(scene.cp.pki_dir / "admin.crt"), str(scene.cp.pki_dir / "admin.key"))
    request = urllib.request.Request(
        f"{scene.cp.url}/apis/{GROUP}/{VERSION}/namespaces/{scene.ns}/podgroups",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    with urllib.request.urlopen(request, context=tls, timeout=10) as resp:
        table = json.loads(resp.read())
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name",
        "MinMember",
        "Running",
        "Queue",
        "Phase",
    ]
    assert table["rows"][0]["cells"][:2] == ["ddp", 2]
