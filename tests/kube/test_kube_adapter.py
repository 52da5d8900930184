"""Adapter details: a standby writes nothing, queue lookups for the webhook come from the watch cache (on
the real API server); the translation of watch events into what the cycle sees (no server needed)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, GROUP, POD_GROUP, QUEUE_LABEL, VERSION
from scheduler.cache.cache import Cache
from scheduler.kube.cluster import KubeCluster
from scheduler.kube.queue_index import informer_queue_lookup
from scheduler.state.backend import get_namespace
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import node_body, pod_body

G = f"{GROUP}/{VERSION}"


def _offline() -> client.ApiClient:
    """A client for a cluster object whose translation is tested without any request being made."""
    return client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))


@pytest.mark.apiserver
def test_standby_derives_groups_but_creates_them_only_when_leading(scene: Scene) -> None:
    """The Job controller makes an Indexed Job's two pods; a standby replica derives their PodGroup from
    the Job but creates it only once it leads."""
    scene.node("gpu-1", gpus=2)
    template: dict[str, Any] = {
        "spec": {
            "schedulerName": "tessera",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}],
        }
    }
    client.BatchV1Api(scene.admin).create_namespaced_job(scene.ns, {
        "metadata": {"name": "ddp"},
        "spec": {"completionMode": "Indexed", "parallelism": 2, "completions": 2, "template": template}})  # fmt: skip
    wait_until(lambda: len(scene.pods()) == 2)
    cluster = KubeCluster(scene.tessera.scheduler_client())
    cluster.writable = False
    cluster.start()
    scene.on_cleanup(cluster.stop)
    assert cluster.wait_synced(10)
    events = cluster.drain_events()
    # The group travels beside the pod (its overlay): the pod object is not rewritten.
    groups = {e.overlay.group for e in events if e.kind == "Pod" and e.overlay is not None
              and e.obj["metadata"]["namespace"] == scene.ns}  # fmt: skip
    (group,) = groups
    assert group is not None
    assert not [
        e
        for e in events
        if e.kind == "Pod" and "tessera.dev/pod-group" in e.obj["metadata"].get("annotations", {})
    ]
    assert not [e for e in events if e.kind == "PodGroup" and e.obj["metadata"]["namespace"] == scene.ns]
    assert scene.custom.list_namespaced_custom_object(GROUP, VERSION, scene.ns, "podgroups")["items"] == []
    cluster.writable = True
    first = cluster.drain_events()
    assert [(e.kind, e.type) for e in first[:1]] == [("PodGroup", "ADDED")]
    # As the API server stored it (its defaults included), with KAI's default priority class for a Job.
    assert first[0].obj["spec"] == {
        "minMember": 2, "queue": "default", "priorityClassName": "train", "staleGraceSeconds": 60
    }  # fmt: skip
    stored = scene.get("podgroups", group)
    assert stored["spec"]["minMember"] == 2 and stored["metadata"]["ownerReferences"][0]["kind"] == "Job"


@pytest.mark.apiserver
def test_every_watch_cache_keeps_objects_without_managed_fields(scene: Scene) -> None:
    """The adapter's caches hold slimmed objects (no managedFields, which the server sets on all of them),
    and what the scheduler reads from them is still there: the node's GPU capacity, the pod's request."""
    scene.node("gpu-1", gpus=2)
    scene.queue("team-a")
    scene.create_pod(pod_body("p", limits={"nvidia.com/gpu": "1"}, labels={QUEUE_LABEL: "team-a"}))
    cluster = KubeCluster(scene.tessera.scheduler_client())
    cluster.writable = False
    cluster.start()
    scene.on_cleanup(cluster.stop)
    assert cluster.wait_synced(10)
    cached = {kind: informer.snapshot() for kind, informer in cluster.informers.items()}
    assert all(cached[kind] for kind in ("Node", "Pod", "Queue", "PriorityClass"))
    assert [(kind, o["metadata"]["name"]) for kind, objs in cached.items() for o in objs
            if "managedFields" in o["metadata"]] == []  # fmt: skip
    node = cluster.informers["Node"].get("gpu-1")
    assert node is not None and node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    pod = cluster.informers["Pod"].get(f"{scene.ns}/p")
    assert pod is not None and pod["metadata"]["labels"] == {QUEUE_LABEL: "team-a"}
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    events = [e for e in cluster.drain_events() if e.kind == "Pod" and e.obj["metadata"]["name"] == "p"]
    assert events and "managedFields" not in events[0].obj["metadata"]


@pytest.mark.apiserver
def test_queue_lookup_from_the_watch_cache(scene: Scene) -> None:
    scene.queue("org-lookup")
    scene.queue("team-lookup", {"parentQueue": "org-lookup"})
    cluster = KubeCluster(scene.tessera.scheduler_client()).start()
    scene.on_cleanup(cluster.stop)
    assert cluster.wait_synced(10)
    lookup = informer_queue_lookup(cluster.informers["Queue"])
    assert (lookup("org-lookup"), lookup("team-lookup"), lookup("nope")) == ("parent", "leaf", None)
    scene.queue("sub-lookup", {"parentQueue": "team-lookup"})
    wait_until(lambda: lookup("team-lookup") == "parent")


def test_a_bound_pod_seen_before_its_node_is_accounted_there_when_it_comes() -> None:
    """Events arrive from independent watches in any order: a bound pod may reach the cycle before its node
    (or its node never comes: deleted before a restart). It is passed on as the watch has it, charged to its
    queue at once, and its GPU share is held on the node as soon as the node comes, before anything could be
    placed there. No node is shown otherwise than it is (no bind lock, no taint of ours)."""
    from scheduler.kube.event_queue import ResourceEvent

    cluster = KubeCluster(_offline())
    cache = Cache.create(get_namespace("numpy"))
    placed = GPUAssignment(
        node="gpu-1", gpus=[AssignedGPU(index=0, uuid="GPU-0", milli=500, memory_mib=40960)]
    )
    running = pod_body(
        "a", node="gpu-1", annotations={"gpu-fraction": "0.5", GPU_ASSIGNMENT: placed.to_annotation()}
    )
    running["metadata"]["uid"] = "uid-a"
    running["status"] = {"phase": "Running"}
    cluster.events.put(ResourceEvent("Pod", "ADDED", running))
    events = cluster.drain_events()
    assert [(e.kind, e.obj["metadata"]["name"]) for e in events] == [("Pod", "a")]
    assert events[0].obj is running
    cache.apply(events)
    assert "uid-a" not in cache.placements and cache.mirror.awaiting_node == {"gpu-1": {"uid-a"}}
    node = node_body("gpu-1", gpus=1)
    cluster.events.put(ResourceEvent("Node", "ADDED", node))
    events = cluster.drain_events()
    assert [(e.kind, e.obj["metadata"]["name"]) for e in events] == [("Node", "gpu-1")]
    assert events[0].obj is node
    cache.apply(events)
    held = cache.placements["uid-a"]
    assert [g.milli for g in held.gpus] == [500] and cache.state.node_names[held.node] == "gpu-1"


def test_a_configured_scheduler_name_is_what_the_cycle_calls_ours() -> None:
    from scheduler.kube.event_queue import ResourceEvent
    from scheduler.model.parse import parse_pod

    cluster = KubeCluster(_offline(), scheduler_name="gpu-sched", podgrouper=False)
    for name, scheduler in (
        ("mine", "gpu-sched"),
        ("builtin-name", "tessera"),
        ("other", "default-scheduler"),
    ):
        body = pod_body(name, scheduler=scheduler)
        body["metadata"]["uid"] = f"uid-{name}"
        cluster.events.put(ResourceEvent("Pod", "ADDED", body))
    forwarded = [e.obj for e in cluster.drain_events()]
    # Unbound pods of other schedulers (even one named tessera) are dropped; the object is not rewritten:
    # the name the cycle calls ours is handed to the parser.
    assert [o["metadata"]["name"] for o in forwarded] == ["mine"]
    assert forwarded[0]["spec"]["schedulerName"] == "gpu-sched"
    assert parse_pod(forwarded[0], scheduler_name="gpu-sched").ours
    assert not parse_pod(forwarded[0]).ours


def test_a_malformed_object_does_not_lose_the_other_events() -> None:
    from scheduler.kube.event_queue import ResourceEvent

    cluster = KubeCluster(_offline())
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "uid": "u1"}, "spec": ["oops"]}
    cluster.events.put(ResourceEvent("Pod", "ADDED", bad))
    cluster.events.put(ResourceEvent("Node", "ADDED", node_body("n1")))
    assert [(e.kind, e.obj["metadata"]["name"]) for e in cluster.drain_events()] == [
        ("Pod", "bad"),
        ("Node", "n1"),
    ]


def test_a_node_report_seen_before_its_node_waits_for_it() -> None:
    """The report and the node come from independent watches: the report applied first would be dropped
    (no row for its node yet) and an unhealthy GPU used; it reaches the cycle right after its node."""
    from scheduler.kube.event_queue import ResourceEvent

    cluster = KubeCluster(_offline())
    report = {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "GPUNodeReport",
              "metadata": {"name": "gpu-1"}, "spec": {"node": "gpu-1", "gpus": []}}  # fmt: skip
    cluster.events.put(ResourceEvent("GPUNodeReport", "ADDED", report))
    assert cluster.drain_events() == []
    cluster.events.put(ResourceEvent("Node", "ADDED", node_body("gpu-1", gpus=1)))
    assert [e.kind for e in cluster.drain_events()] == ["Node", "GPUNodeReport"]
    cluster.events.put(ResourceEvent("GPUNodeReport", "MODIFIED", report))  # the node is known now
    assert [e.kind for e in cluster.drain_events()] == ["GPUNodeReport"]


@pytest.mark.apiserver
def test_a_podgroup_priority_class_is_resolved_from_the_cluster(scene: Scene) -> None:
    """A PodGroup naming a PriorityClass the cluster defines gets that class's value, not the built-in
    fallback (`train`): the adapter hands the cycle the PriorityClasses it watches."""
    api = client.SchedulingV1Api(scene.admin)
    name = f"urgent-{scene.ns}"
    api.create_priority_class({"metadata": {"name": name}, "value": 120})
    scene.on_cleanup(lambda: api.delete_priority_class(name))
    scene.podgroup("g", {"minMember": 1, "queue": "default", "priorityClassName": name})
    scene.create_pod(pod_body("m", annotations={POD_GROUP: "g"}, namespace=scene.ns))
    cluster = KubeCluster(scene.tessera.scheduler_client()).start()
    scene.on_cleanup(cluster.stop)
    assert cluster.wait_synced(10)
    cache = Cache.create(get_namespace("numpy"))
    cache.apply(cluster.drain_events())
    job = next(j for j in cache.index.jobs() if j.key == f"{scene.ns}/g")
    assert (job.priority, job.preemptible) == (120, False)


def test_a_pod_is_movable_only_when_a_controller_owns_it(scene: Scene) -> None:
    """Consolidation moves a pod by evicting it for its controller to recreate: the pod a Job controller
    made (kube-controller-manager's, with its ownerReference) parses as owned, a bare pod does not."""
    from scheduler.model.parse import parse_pod

    template = pod_body("ignored")
    template["spec"]["restartPolicy"] = "Never"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "owned"},
           "spec": {"template": {"spec": template["spec"]}, "backoffLimit": 0}}  # fmt: skip
    client.BatchV1Api(scene.admin).create_namespaced_job(scene.ns, job)
    scene.create_pod(pod_body("bare"))

    def both() -> dict[str, Any] | None:
        pods = {p["metadata"]["name"]: p for p in scene.pods()}
        made = [p for name, p in pods.items() if name.startswith("owned-")]
        return {"owned": made[0], "bare": pods["bare"]} if made and "bare" in pods else None

    wait_until(lambda: both() is not None, timeout=30)
    pods = both()
    assert pods is not None
    assert parse_pod(pods["owned"]).controlled
    assert not parse_pod(pods["bare"]).controlled


def test_a_device_plugin_mark_ends_the_pause_while_pods_are_queued_behind_the_plugin() -> None:
    """While fractions are queued behind the device plugin (their places reserved on nodes whose pod it has
    yet to allocate), the plugin's mark ends the pause between cycles at once, not after `min_cycle_gap_s`:
    the node's next pod is bound first thing in the next cycle. Without pods queued, the gap holds."""
    import copy
    import threading
    import time

    from scheduler.api.keys import GPU_ALLOCATED
    from scheduler.kube.event_queue import ResourceEvent
    from scheduler.kube.runner import RunnerConfig, SchedulerRunner

    runner = SchedulerRunner(
        _offline(), RunnerConfig(leader_elect=False, cycle_interval_s=4, min_cycle_gap_s=2)
    )
    old = pod_body("a", node="gpu-1", annotations={"gpu-fraction": "0.5"})
    old["metadata"]["uid"] = "uid-a"
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][GPU_ALLOCATED] = '{"gpus": [{"index": 0}]}'

    def pause_with_mark_after(delay_s: float) -> float:
        mark = ResourceEvent("Pod", "MODIFIED", new, old)
        timer = threading.Timer(delay_s, runner.cluster._received, [mark])
        t0 = time.monotonic()
        timer.start()
        runner._pause()
        timer.join()
        return time.monotonic() - t0

    assert not runner.scheduler.queued_behind_plugin()
    assert pause_with_mark_after(0.1) >= 2.0  # nothing queued: the gap holds (the mark wakes it after)
    runner.cluster.wait_for_mark(0)
    runner.scheduler.queued_behind_plugin = lambda: True  # type: ignore[method-assign]
    assert pause_with_mark_after(0.1) < 1.5
    unchanged = ResourceEvent("Pod", "MODIFIED", new, new)  # the mark was there already: not a new one
    runner.cluster._received(unchanged)
    assert not runner.cluster.wait_for_mark(0)
