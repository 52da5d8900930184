"""Adapter details: standby writes nothing, queue lookups for the webhook from the watch cache."""

from __future__ import annotations

from scheduler.kube.cluster import KubeCluster
from scheduler.kube.queue_index import informer_queue_lookup
from tests.fakes.kubeapi import FakeKubeAPI
from tests.kube.helpers import node_body, pod_body, wait_for

G = "scheduling.tessera.dev/v1alpha1"


def test_standby_derives_groups_but_creates_them_only_when_leading(kube_api: FakeKubeAPI) -> None:
    job = kube_api.seed({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                         "metadata": {"name": "ddp", "namespace": "default"},
                         "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}})  # fmt: skip
    pod = pod_body("ddp-worker-0")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "ddp",
                                           "uid": job["metadata"]["uid"], "controller": True}]  # fmt: skip
    kube_api.seed(node_body("gpu-1", gpus=1))
    kube_api.seed(pod)
    cluster = KubeCluster(kube_api.client()).start()
    try:
        assert cluster.wait_synced(5)
        cluster.writable = False
        events = cluster.drain_events()
        (pod_event,) = [e for e in events if e.kind == "Pod"]
        group = pod_event.obj["metadata"]["annotations"]["tessera.dev/pod-group"]
        assert not kube_api.requests_matching("POST") and not [e for e in events if e.kind == "PodGroup"]
        cluster.writable = True
        first = cluster.drain_events()
        assert [(e.kind, e.type) for e in first[:1]] == [("PodGroup", "ADDED")]
        assert first[0].obj["spec"] == {"minMember": 2, "queue": "default", "priorityClassName": "train"}
        assert kube_api.get("podgroups", group, "default")["spec"]["minMember"] == 2
    finally:
        cluster.stop()


def test_queue_lookup_from_the_watch_cache(kube_api: FakeKubeAPI) -> None:
    kube_api.seed({"apiVersion": G, "kind": "Queue", "metadata": {"name": "org"}})
    kube_api.seed(
        {"apiVersion": G, "kind": "Queue", "metadata": {"name": "team"}, "spec": {"parentQueue": "org"}}
    )
    cluster = KubeCluster(kube_api.client()).start()
    try:
        assert cluster.wait_synced(5)
        lookup = informer_queue_lookup(cluster.informers["Queue"])
        assert (lookup("org"), lookup("team"), lookup("nope")) == ("parent", "leaf", None)
        kube_api.seed(
            {"apiVersion": G, "kind": "Queue", "metadata": {"name": "sub"}, "spec": {"parentQueue": "team"}}
        )
        wait_for(lambda: lookup("team") == "parent")
    finally:
        cluster.stop()


def test_bound_pod_waits_for_its_node_and_locked_nodes_are_tainted(kube_api: FakeKubeAPI) -> None:
    """Events arrive from independent watches in any order: a bound pod must reach the cycle after its node
    (else its GPU share is never accounted); a node whose bind lock waits for the device plugin is shown
    tainted, so the cycle places GPU pods elsewhere."""
    from scheduler.api.bind_lock import BindLock
    from scheduler.kube.event_queue import ResourceEvent

    cluster = KubeCluster(kube_api.client())
    running = pod_body("a", node="gpu-1", annotations={"gpu-fraction": "0.5"})
    running["metadata"]["uid"] = "uid-a"
    cluster.events.put(ResourceEvent("Pod", "ADDED", running))
    assert cluster.drain_events() == []
    waiting = pod_body("b", annotations={"gpu-fraction": "0.5"})
    waiting["metadata"]["uid"] = "uid-b"
    cluster.informers["Pod"].cache["default/b"] = waiting  # b was bound by someone, not yet allocated
    waiting_bound = {
        **waiting,
        "spec": {**waiting["spec"], "nodeName": "gpu-1"},
        "status": {"phase": "Pending"},
    }
    cluster.informers["Pod"].cache["default/b"] = waiting_bound
    node = node_body("gpu-1", gpus=1)
    node["metadata"]["annotations"] = {
        "tessera.dev/bind-lock": BindLock.for_pod("default", "b", "uid-b").to_annotation()
    }
    cluster.informers["Node"].cache["gpu-1"] = node
    cluster.events.put(ResourceEvent("Node", "ADDED", node))
    events = cluster.drain_events()
    assert [(e.kind, e.obj["metadata"]["name"]) for e in events] == [("Node", "gpu-1"), ("Pod", "a")]
    assert events[0].obj["spec"]["taints"] == [
        {"key": "tessera.dev/bind-lock", "value": "", "effect": "NoSchedule"}
    ]
    assert "spec" not in node or "taints" not in node.get("spec", {})  # the cached object is untouched
    # The device plugin served b: the node comes back untainted without any node event.
    cluster.informers["Pod"].cache["default/b"] = {**waiting_bound, "status": {"phase": "Running"}}
    refreshed = cluster.drain_events()
    assert [(e.kind, e.type) for e in refreshed] == [("Node", "MODIFIED")]
    assert not refreshed[0].obj.get("spec", {}).get("taints")


def test_a_configured_scheduler_name_is_what_the_cycle_calls_ours(kube_api: FakeKubeAPI) -> None:
    from scheduler.kube.event_queue import ResourceEvent
    from scheduler.objects import parse_pod

    cluster = KubeCluster(kube_api.client(), scheduler_name="gpu-sched", podgrouper=False)
    for name, scheduler in (
        ("mine", "gpu-sched"),
        ("builtin-name", "tessera"),
        ("other", "default-scheduler"),
    ):
        body = pod_body(name, scheduler=scheduler)
        body["metadata"]["uid"] = f"uid-{name}"
        cluster.events.put(ResourceEvent("Pod", "ADDED", body))
    forwarded = {e.obj["metadata"]["name"]: parse_pod(e.obj).ours for e in cluster.drain_events()}
    assert forwarded == {
        "mine": True
    }  # unbound pods of other schedulers (even one named tessera) are dropped


def test_a_malformed_object_does_not_lose_the_other_events(kube_api: FakeKubeAPI) -> None:
    from scheduler.kube.event_queue import ResourceEvent

    cluster = KubeCluster(kube_api.client())
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "uid": "u1"}, "spec": ["oops"]}
    cluster.events.put(ResourceEvent("Pod", "ADDED", bad))
    cluster.events.put(ResourceEvent("Node", "ADDED", node_body("n1")))
    assert [(e.kind, e.obj["metadata"]["name"]) for e in cluster.drain_events()] == [
        ("Pod", "bad"),
        ("Node", "n1"),
    ]
