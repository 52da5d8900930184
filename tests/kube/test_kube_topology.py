"""Topologies on the real kube-apiserver: the CRD's validation as the server runs it, `kubectl get
topologies`, and gangs placed inside one rack by the real scheduling cycle, which watches Topology objects
with the chart's RBAC (a Topology created after its gang is picked up from the watch)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes.client.rest import ApiException

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, GROUP, VERSION
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver

RACK = "example.com/rack"


def topology(scene: Scene, name: str, levels: list[dict[str, str]]) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": levels}}  # fmt: skip
    created = dict(scene.custom.create_cluster_custom_object(GROUP, VERSION, "topologies", body))
    scene.track("topologies", name)
    return created


def test_the_server_validates_topologies_as_the_model_does(scene: Scene) -> None:
    for levels, message in (
        ([{"nodeLabel": "a/zone"}, {"nodeLabel": "a/zone"}], "nodeLabel must be unique"),
        ([{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": RACK}], "can only be the last"),
        ([{"nodeLabel": "a/zone", "alias": RACK}, {"nodeLabel": RACK}], "an alias must be unique"),
        ([], "should have at least 1 items"),
    ):
        with pytest.raises(ApiException) as err:
            topology(scene, "bad", levels)
        assert err.value.status == 422 and message in str(err.value.body), err.value.body
    topology(scene, "dc", [{"nodeLabel": "topology.kubernetes.io/zone", "alias": "zone"},
                           {"nodeLabel": RACK, "alias": "rack"}])  # fmt: skip
    out = scene.cp.kubectl("get", "topologies", "dc").stdout
    assert out.split("\n")[0].split()[:2] == ["NAME", "OUTERMOST"] and "topology.kubernetes.io/zone" in out, (
        out
    )
    docs = yaml.safe_load(scene.cp.kubectl("get", "ttopo", "dc", "-o", "yaml").stdout)
    assert [lv["alias"] for lv in docs["spec"]["levels"]] == ["zone", "rack"]


def rack_of(scene: Scene, pod: dict[str, Any]) -> str:
    a = GPUAssignment.from_annotation(pod["metadata"]["annotations"][GPU_ASSIGNMENT])
    return str(scene.node_obj(a.node)["metadata"]["labels"][RACK])


def test_a_gang_lands_inside_one_rack_and_waits_for_its_topology(scene: Scene) -> None:
    for i in range(4):
        scene.node(f"gpu-{i}", gpus=2, labels={RACK: f"rack-{i // 2}"})
    scene.kubelet()
    runner = scene.scheduler()
    scene.create_pod(pod_body("single", limits={"nvidia.com/gpu": "1"}))
    wait_until(lambda: "single" in scene.bound())
    first = rack_of(scene, scene.bound()["single"])
    scene.podgroup(
        "ddp", {"minMember": 4, "topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "rack"}}
    )
    for i in range(4):
        scene.create_pod(pod_body(f"ddp-{i}", annotations={"tessera.dev/pod-group": "ddp"},
                                  limits={"nvidia.com/gpu": "1"}))  # fmt: skip

    def told_invalid() -> bool:
        cond = next(
            (c for c in scene.pod("ddp-0")["status"].get("conditions", []) if c["type"] == "PodScheduled"), {}
        )
        # The condition's reason is Kubernetes' Unschedulable; Tessera's reason leads the message.
        return (
            cond.get("message", "").startswith("InvalidTopology: ")
            and "topology dc does not exist" in cond["message"]
        )

    wait_until(told_invalid)
    cycles = runner.cycles
    wait_until(lambda: runner.cycles >= cycles + 3)
    assert not any(name.startswith("ddp") for name in scene.bound())
    topology(scene, "dc", [{"nodeLabel": RACK, "alias": "rack"}])
    wait_until(lambda: sum(name.startswith("ddp") for name in scene.bound()) == 4, timeout=20)
    racks = {rack_of(scene, p) for name, p in scene.bound().items() if name.startswith("ddp")}
    assert racks == {"rack-1" if first == "rack-0" else "rack-0"}  # the rack without the single pod
    assert all(v <= 1000 for v in scene.gpu_use().values())


def test_a_cluster_without_the_topology_crd_still_syncs(scene: Scene) -> None:
    """After a chart upgrade (Helm never installs new CRDs then) the Topology kind may not be served: its
    watch counts as synced and empty, so the scheduler becomes ready; the list keeps being retried."""
    from kubernetes import client

    from scheduler.kube.backoff import Backoff
    from scheduler.kube.event_queue import EventQueue
    from scheduler.kube.informer import Informer, WatchTarget

    # As the admin: the chart's RBAC names the kind, so the server answers 404 (not 403) for a missing CRD.
    custom = client.CustomObjectsApi(scene.admin)
    missing = WatchTarget("Topology", custom.list_cluster_custom_object, (GROUP, VERSION, "notservedyets"),
                          optional=True)  # fmt: skip
    informer = Informer(missing, EventQueue().put, backoff=Backoff(initial_s=0.05, max_s=0.2)).start()
    scene.on_cleanup(informer.stop)
    assert informer.synced.wait(10) and informer.snapshot() == []
    wait_until(lambda: informer.errors >= 2)  # still trying
    required = Informer(WatchTarget("Topology", custom.list_cluster_custom_object, (GROUP, VERSION, "notservedyets")),
                        EventQueue().put, backoff=Backoff(initial_s=0.05, max_s=0.2)).start()  # fmt: skip
    scene.on_cleanup(required.stop)
    assert not required.synced.wait(0.5)  # without `optional`, a missing kind never syncs
