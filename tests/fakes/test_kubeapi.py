"""The fake API server, driven through the real `kubernetes` client as the scheduler will drive it."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.fakes.kubeapi import FakeKubeAPI

G, V = "scheduling.tessera.dev", "v1alpha1"


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


def message(exc: ApiException) -> str:
    return str(json.loads(exc.body)["message"])


@pytest.fixture
def core(kube_api: FakeKubeAPI) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api.client())


@pytest.fixture
def custom(kube_api: FakeKubeAPI) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_api.client())


def test_create_sets_identity_and_monotonic_resource_versions(core: client.CoreV1Api) -> None:
    a = core.create_namespaced_pod("default", pod("a"))
    b = core.create_namespaced_pod("default", pod("b"))
    assert a.metadata.uid and b.metadata.uid and a.metadata.uid != b.metadata.uid
    assert a.metadata.creation_timestamp is not None
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    assert a.status.phase == "Pending" and a.spec.scheduler_name == "default-scheduler"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("a"))
    assert err.value.status == 409 and json.loads(err.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("missing", "default")
    assert err.value.status == 404
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("nowhere", pod("c"))
    assert err.value.status == 404 and "namespaces" in json.loads(err.value.body)["message"]


def test_pod_validation_and_priority_admission(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", {"metadata": {"name": "x"}, "spec": {"containers": []}})
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("x", priorityClassName="train"))
    assert err.value.status == 403 and "no PriorityClass with name train" in message(err.value)
    sched = client.SchedulingV1Api(kube_api.client())
    sched.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name="train"), value=50))
    created = core.create_namespaced_pod("default", pod("x", priorityClassName="train"))
    assert created.spec.priority == 50


def test_replace_conflicts_on_stale_resource_version(core: client.CoreV1Api) -> None:
    first = core.create_namespaced_pod("default", pod("a"))
    first.metadata.labels = {"v": "1"}
    updated = core.replace_namespaced_pod("a", "default", first)
    assert updated.metadata.labels == {"v": "1"}
    first.metadata.labels = {"v": "2"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_pod("a", "default", first)
    assert err.value.status == 409 and "has been modified" in message(err.value)


def test_patch_formats_and_pod_spec_immutability(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    core.create_namespaced_pod("default", pod("a", tolerations=[]))
    # dict body: the client sends a strategic merge patch
    core.patch_namespaced_pod("a", "default", {"metadata": {"annotations": {"k": "v", "gone": "x"}}})
    core.patch_namespaced_pod("a", "default", {"metadata": {"annotations": {"gone": None}}})
    # list body: a JSON patch
    core.patch_namespaced_pod(
        "a", "default", [{"op": "add", "path": "/metadata/labels", "value": {"l": "1"}}]
    )
    merged = core.patch_namespaced_pod(
        "a", "default", {"metadata": {"labels": {"m": "2"}}}, _content_type="application/merge-patch+json"
    )
    assert merged.metadata.annotations == {"k": "v"}
    assert merged.metadata.labels == {"l": "1", "m": "2"}
    assert [r.content_type for r in kube_api.requests_matching("PATCH", "/pods/a$")] == [
        "application/strategic-merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/json-patch+json",
        "application/merge-patch+json",
    ]
    # strategic merge merges containers by name: changing the image is allowed, adding a limit is not
    core.patch_namespaced_pod("a", "default", {"spec": {"containers": [{"name": "main", "image": "alpine"}]}})
    assert kube_api.get("pods", "a")["spec"]["containers"] == [{"name": "main", "image": "alpine"}]
    for forbidden in (
        {"spec": {"nodeName": "n1"}},
        {"spec": {"containers": [{"name": "main", "resources": {"limits": {"tessera.dev/gpu-slice": "1"}}}]}},
    ):
        with pytest.raises(ApiException) as err:
            core.patch_namespaced_pod("a", "default", forbidden)
        assert err.value.status == 422 and "pod updates may not change" in message(err.value)
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("a", "default", [{"op": "test", "path": "/metadata/name", "value": "b"}])
    assert err.value.status == 422


def test_selectors_and_pagination(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    core.create_namespaced_pod("default", pod("a", {"app": "x", "tier": "web"}, schedulerName="tessera"))
    core.create_namespaced_pod("default", pod("b", {"app": "y"}))
    kube_api.seed(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "c", "namespace": "kube-system"},
            "spec": {"nodeName": "n1", "containers": [{"name": "m", "image": "i"}]},
        }
    )

    def names(items: list[Any]) -> list[str]:
        return sorted(p.metadata.name for p in items)

    assert names(core.list_namespaced_pod("default", label_selector="app in (x,z),tier").items) == ["a"]
    assert names(core.list_namespaced_pod("default", label_selector="app!=x").items) == ["b"]
    assert names(core.list_namespaced_pod("default", label_selector="!tier").items) == ["b"]
    assert names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1").items) == ["c"]
    assert names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName=").items) == ["a", "b"]
    assert names(core.list_pod_for_all_namespaces(field_selector="metadata.name=b").items) == ["b"]
    assert names(core.list_namespaced_pod("default", field_selector="spec.schedulerName=tessera").items) == [
        "a"
    ]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", field_selector="spec.bogus=1")
    assert err.value.status == 400 and "field label not supported" in message(err.value)
    page = core.list_pod_for_all_namespaces(limit=2)
    assert len(page.items) == 2 and page.metadata._continue
    rest = core.list_pod_for_all_namespaces(limit=2, _continue=page.metadata._continue)
    assert len(rest.items) == 1 and not rest.metadata._continue


def test_binding_subresource(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    core.create_namespaced_pod("default", pod("a"))
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="a", annotations={"tessera.dev/note": "x"}),
        target=client.V1ObjectReference(kind="Node", name="n1"),
    )
    # The server answers a Status, which the generated client cannot read as a V1Binding: skip decoding.
    resp = core.create_namespaced_pod_binding("a", "default", binding, _preload_content=False)
    assert resp.status == 201 and json.loads(resp.data)["status"] == "Success"
    bound = kube_api.get("pods", "a")
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"] == {"tessera.dev/note": "x"}
    assert any(c["type"] == "PodScheduled" and c["status"] == "True" for c in bound["status"]["conditions"])
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("a", "default", binding, _preload_content=False)
    assert err.value.status == 409 and 'already assigned to node "n1"' in message(err.value)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("zz", "default", binding, _preload_content=False)
    assert err.value.status == 404


def _eviction(name: str) -> client.V1Eviction:
    return client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="default"))


def test_eviction_subresource_with_refusals_and_budgets(
    core: client.CoreV1Api, kube_api: FakeKubeAPI
) -> None:
    for name in ("a", "b"):
        core.create_namespaced_pod("default", pod(name, {"app": "w"}))
        kube_api.set_pod_phase(name)
    kube_api.refuse_evictions(name="a", times=1)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("a", "default", _eviction("a"), _preload_content=False)
    assert err.value.status == 429 and "disruption budget" in message(err.value)
    policy = client.PolicyV1Api(kube_api.client())
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {"metadata": {"name": "pdb"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "w"}}}},
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("a", "default", _eviction("a"), _preload_content=False)
    causes = json.loads(err.value.body)["details"]["causes"]
    assert (
        err.value.status == 429 and "The disruption budget pdb needs 2 healthy pods" in causes[0]["message"]
    )
    policy.delete_namespaced_pod_disruption_budget("pdb", "default")
    resp = core.create_namespaced_pod_eviction("a", "default", _eviction("a"), _preload_content=False)
    assert resp.status == 201 and kube_api.find("pods", "a") is None
    assert kube_api.requests_matching("POST", "/pods/a/eviction$")[-1].body["metadata"]["name"] == "a"


def test_graceful_deletion_and_finalizers(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    kube_api.graceful_pod_deletion = True
    core.create_namespaced_pod("default", pod("a", nodeName="n1"))
    core.delete_namespaced_pod("a", "default")
    assert kube_api.get("pods", "a")["metadata"]["deletionTimestamp"]
    assert kube_api.complete_pod_deletions() == 1 and kube_api.find("pods", "a") is None
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "c", "finalizers": ["x/y"]}})
    core.delete_namespaced_config_map("c", "default")
    assert kube_api.get("configmaps", "c")["metadata"]["deletionTimestamp"]
    core.patch_namespaced_config_map("c", "default", [{"op": "remove", "path": "/metadata/finalizers"}])
    assert kube_api.find("configmaps", "c") is None
    assert cm.metadata.uid
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_pod("gone", "default")
    assert err.value.status == 404


def test_custom_resources_cluster_and_namespaced_with_status(
    custom: client.CustomObjectsApi, kube_api: FakeKubeAPI
) -> None:
    queue = {
        "apiVersion": f"{G}/{V}",
        "kind": "Queue",
        "metadata": {"name": "team-a"},
        "spec": {"priority": 100},
        "status": {"allocated": {"gpu": 99}},
    }
    created = custom.create_cluster_custom_object(G, V, "queues", queue)
    assert "status" not in created  # a CRD with a status subresource drops status on create
    custom.patch_cluster_custom_object_status(G, V, "queues", "team-a", {"status": {"allocated": {"gpu": 2}}})
    # writes to the main resource keep the stored status
    custom.patch_cluster_custom_object(G, V, "queues", "team-a", {"spec": {"priority": 5}, "status": {}})
    stored = custom.get_cluster_custom_object(G, V, "queues", "team-a")
    assert stored["spec"]["priority"] == 5 and stored["status"] == {"allocated": {"gpu": 2}}
    assert stored["metadata"]["generation"] == 2
    stale = dict(created, spec={"priority": 1})
    with pytest.raises(ApiException) as err:
        custom.replace_cluster_custom_object(G, V, "queues", "team-a", stale)
    assert err.value.status == 409
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object(
            G, V, "queues", "team-a", {"spec": {}}, _content_type="application/strategic-merge-patch+json"
        )
    assert err.value.status == 415
    pg = {"apiVersion": f"{G}/{V}", "kind": "PodGroup", "metadata": {"name": "g"}, "spec": {"minMember": 2}}
    custom.create_namespaced_custom_object(G, V, "default", "podgroups", pg)
    listed = custom.list_namespaced_custom_object(G, V, "default", "podgroups")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["g"] and listed["kind"] == "PodGroupList"
    assert listed["items"][0]["kind"] == "PodGroup"
    assert (
        custom.list_cluster_custom_object(G, V, "podgroups")["items"][0]["metadata"]["namespace"] == "default"
    )
    custom.delete_namespaced_custom_object(G, V, "default", "podgroups", "g")
    assert kube_api.find("podgroups", "g") is None
    kube_api.register_custom_resource("example.com", "v1", "widgets", "Widget", namespaced=False)
    custom.create_cluster_custom_object("example.com", "v1", "widgets", {"metadata": {"name": "w"}})
    assert kube_api.get("widgets", "w", group="example.com")["kind"] == "Widget"
    with pytest.raises(ApiException) as err:
        custom.list_cluster_custom_object("example.com", "v2", "widgets")
    assert err.value.status == 404


def test_leases_and_events(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    coord = client.CoordinationV1Api(kube_api.client())
    lease = coord.create_namespaced_lease(
        "kube-system",
        client.V1Lease(
            metadata=client.V1ObjectMeta(name="tessera"), spec=client.V1LeaseSpec(holder_identity="a")
        ),
    )
    lease.spec.holder_identity = "b"
    assert coord.replace_namespaced_lease("tessera", "kube-system", lease).spec.holder_identity == "b"
    with pytest.raises(ApiException):
        coord.replace_namespaced_lease("tessera", "kube-system", lease)  # stale resourceVersion
    core.create_namespaced_event(
        "default",
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name="p."),
            reason="Unschedulable",
            message="no GPU",
            involved_object=client.V1ObjectReference(kind="Pod", name="p", namespace="default"),
        ),
    )
    events = kube_api.events_for("p", kind="Pod")
    assert [e["reason"] for e in events] == ["Unschedulable"] and events[0]["metadata"]["name"].startswith(
        "p."
    )
    assert [
        e.reason
        for e in core.list_namespaced_event(
            "default", field_selector="involvedObject.name=p,reason=Unschedulable"
        ).items
    ] == ["Unschedulable"]


def _collect(api_call: Any, stop_after: int, **kwargs: Any) -> list[tuple[str, dict[str, Any]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    w = watch.Watch()
    for event in w.stream(api_call, **kwargs):
        seen.append((event["type"], event["raw_object"]))
        if len(seen) >= stop_after:
            w.stop()
    return seen


def test_watch_from_resource_version_with_selector_transitions(
    core: client.CoreV1Api, kube_api: FakeKubeAPI
) -> None:
    start = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("a"))
    core.create_namespaced_pod("default", pod("b"))
    core.create_namespaced_pod_binding(
        "a",
        "default",
        client.V1Binding(metadata=client.V1ObjectMeta(name="a"), target=client.V1ObjectReference(name="n1")),
        _preload_content=False,
    )
    core.delete_namespaced_pod("b", "default")
    # A watch of pending pods sees a leave the selection as DELETED once it is bound.
    events = _collect(
        core.list_namespaced_pod,
        4,
        namespace="default",
        resource_version=start,
        field_selector="spec.nodeName=",
        timeout_seconds=5,
    )
    assert [(t, o["metadata"]["name"]) for t, o in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
        ("DELETED", "b"),
    ]
    rvs = [int(o["metadata"]["resourceVersion"]) for _, o in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 4


def test_watch_without_resource_version_replays_current_state(
    core: client.CoreV1Api, kube_api: FakeKubeAPI
) -> None:
    core.create_namespaced_pod("default", pod("a"))
    got: list[tuple[str, str]] = []
    w = watch.Watch()

    def later() -> None:
        time.sleep(0.3)
        core.create_namespaced_pod("default", pod("b"))

    threading.Thread(target=later, daemon=True).start()
    for event in w.stream(core.list_namespaced_pod, "default", timeout_seconds=5):
        got.append((event["type"], event["object"].metadata.name))
        if len(got) == 2:
            w.stop()
    assert got == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_bookmarks_and_timeout(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("a"))
    begun = time.monotonic()
    events = list(
        watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
    )
    assert 0.9 <= time.monotonic() - begun < 3
    kinds = [e["type"] for e in events]
    assert kinds[0] == "ADDED" and "BOOKMARK" in kinds
    bookmark = next(e["raw_object"] for e in events if e["type"] == "BOOKMARK")
    assert (
        bookmark["kind"] == "Pod"
        and int(bookmark["metadata"]["resourceVersion"]) >= kube_api.resource_version
    )


def test_watch_from_expired_resource_version_gets_410(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    old = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("a"))
    kube_api.expire_history()
    # Raw protocol: a 200 stream whose only event is an ERROR carrying a 410 Status.
    resp = core.list_namespaced_pod("default", watch=True, resource_version=old, _preload_content=False)
    lines = [json.loads(line) for line in resp.data.decode().splitlines() if line]
    assert resp.status == 200 and [e["type"] for e in lines] == ["ERROR"]
    assert lines[0]["object"]["code"] == 410 and lines[0]["object"]["reason"] == "Expired"
    # The client's Watch surfaces it as an ApiException(410) when it may not retry.
    with pytest.raises(ApiException) as err:
        list(
            watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=old, timeout_seconds=2)
        )
    assert err.value.status == 410
    # A fresh list gives a resourceVersion the watch accepts again.
    fresh = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("b"))
    events = _collect(
        core.list_namespaced_pod, 1, namespace="default", resource_version=fresh, timeout_seconds=2
    )
    assert [(t, o["metadata"]["name"]) for t, o in events] == [("ADDED", "b")]


def test_dropped_watch_is_resumed_by_the_client_from_its_last_version(
    core: client.CoreV1Api, kube_api: FakeKubeAPI
) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    got: list[str] = []
    w = watch.Watch()
    done = threading.Event()

    def consume() -> None:
        for event in w.stream(core.list_namespaced_pod, "default", resource_version=rv):
            got.append(event["object"].metadata.name)
            if len(got) == 2:
                w.stop()
        done.set()

    threading.Thread(target=consume, daemon=True).start()
    core.create_namespaced_pod("default", pod("a"))
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    kube_api.drop_watches()
    core.create_namespaced_pod("default", pod("b"))
    assert done.wait(5)
    assert got == ["a", "b"]
    watches = [r for r in kube_api.requests_matching("GET", "/namespaces/default/pods$") if r.param("watch")]
    assert len(watches) >= 2
    assert watches[-1].param("resourceVersion") == kube_api.get("pods", "a")["metadata"]["resourceVersion"]


def test_injected_failures_and_request_log(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    kube_api.fail_next("POST", r"/pods$", code=503, message="etcd unavailable")
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("a"))
    assert err.value.status == 503
    core.create_namespaced_pod("default", pod("a"))
    posts = kube_api.requests_matching("POST", r"/api/v1/namespaces/default/pods$")
    assert [r.status for r in posts] == [503, 201] and posts[1].body["metadata"]["name"] == "a"


def test_namespaces_and_deletecollection(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    assert kube_api.get("namespaces", "team")["status"]["phase"] == "Active"
    core.create_namespaced_pod("team", pod("a", {"x": "1"}))
    core.create_namespaced_pod("team", pod("b", {"x": "2"}))
    core.delete_collection_namespaced_pod("team", label_selector="x=1")
    assert [p["metadata"]["name"] for p in kube_api.objects("pods", "team")] == ["b"]
    core.delete_namespace("team")
    assert kube_api.objects("pods", "team") == [] and kube_api.find("namespaces", "team") is None
