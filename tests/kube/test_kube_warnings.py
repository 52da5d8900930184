"""On the real API server: the scheduler's warnings become Warning Events on the objects they are about
(a Queue whose parent is missing, a pod naming a missing PodGroup), where `kubectl describe` shows them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.kube.cluster import KubeCluster
from scheduler.sandbox.controlplane import ControlPlane
from tests.kube.helpers import pod_body, wait_for

pytestmark = pytest.mark.apiserver
CRDS = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "tessera" / "crds"
G = "scheduling.tessera.dev"


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane) -> None:
    control_plane.kubectl("apply", "-f", str(CRDS))
    control_plane.wait_established(CRDS)


def events_about(api: client.ApiClient, namespace: str, kind: str, name: str) -> list[Any]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    return list(client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=selector).items)


def test_warnings_are_events_on_their_objects(
    kube_admin: client.ApiClient, namespace: str, crds: None
) -> None:
    custom = client.CustomObjectsApi(kube_admin)
    orphan = f"orphan-{uuid.uuid4().hex[:6]}"
    custom.create_cluster_custom_object(G, "v1alpha1", "queues", {
        "apiVersion": f"{G}/v1alpha1", "kind": "Queue", "metadata": {"name": orphan},
        "spec": {"parentQueue": "nowhere", "resources": {"gpu": {"quota": 1}}},
    })  # fmt: skip
    pod = pod_body(
        "lonely", namespace=namespace, labels={"tessera.dev/queue": orphan},
        annotations={"tessera.dev/pod-group": "ghost"}, limits={"nvidia.com/gpu": "1"},
    )  # fmt: skip
    # It must stay pending (the warning is about waiting pods): GPU nodes earlier tests left in the shared
    # API server would take it.
    pod["spec"]["nodeSelector"] = {"tessera.dev/test": "no-such-node"}
    client.CoreV1Api(kube_admin).create_namespaced_pod(namespace, pod)
    node = f"warn-l4-{uuid.uuid4().hex[:6]}"  # GPUs, a known product, no nvidia.com/gpu.memory label
    core = client.CoreV1Api(kube_admin)
    core.create_node({"metadata": {"name": node, "labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}}})
    core.patch_node_status(node, {"status": {"capacity": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi"},
                                             "allocatable": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi"}}})  # fmt: skip
    cluster = KubeCluster(kube_admin, podgrouper=False).start()
    try:
        assert cluster.wait_synced(10)
        scheduler = Scheduler(cluster, SchedulerConfig())

        def warned() -> bool:
            scheduler.run_cycle()
            queue = events_about(kube_admin, "default", "Queue", orphan)
            pods = events_about(kube_admin, namespace, "Pod", "lonely")
            nodes = events_about(kube_admin, "default", "Node", node)
            return (
                any(e.reason == "QueueMisconfigured" for e in queue)
                and any(e.reason == "PodGroupNotFound" for e in pods)
                and any(e.reason == "GPUMemoryAssumed" for e in nodes)
            )

        wait_for(warned, timeout=20, interval=0.2)
        (queue_event,) = [
            e for e in events_about(kube_admin, "default", "Queue", orphan) if e.type == "Warning"
        ]
        assert "parent queue nowhere does not exist" in queue_event.message
        assert queue_event.involved_object.namespace in (None, "")  # a Queue lives in no namespace
        (pod_event,) = [
            e for e in events_about(kube_admin, namespace, "Pod", "lonely") if e.reason == "PodGroupNotFound"
        ]
        assert (
            f"PodGroup {namespace}/ghost does not exist" in pod_event.message and pod_event.type == "Warning"
        )
        for _ in range(3):  # warned once, not once per cycle
            scheduler.run_cycle()
        assert (
            len(
                [
                    e
                    for e in events_about(kube_admin, namespace, "Pod", "lonely")
                    if e.reason == "PodGroupNotFound"
                ]
            )
            == 1
        )
        (node_event,) = [
            e for e in events_about(kube_admin, "default", "Node", node) if e.reason == "GPUMemoryAssumed"
        ]
        assert "assuming 23034 MiB per GPU" in node_event.message
    finally:
        cluster.stop()
        custom.delete_cluster_custom_object(G, "v1alpha1", "queues", orphan)
        core.delete_node(node)
