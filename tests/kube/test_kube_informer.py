"""The informer against the real API server: paged list, watch, bookmarks, the scheduler's transform of
cached objects (`slim`), and, through the fault proxy, a lost watch whose history is gone (410: relist and
emit only the difference) and backoff on errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from scheduler.kube.backoff import Backoff
from scheduler.kube.event_queue import EventQueue, ResourceEvent
from scheduler.kube.informer import Informer, WatchTarget, slim
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver


def _informer(
    scene: Scene, proxy: FaultProxy, queue: EventQueue, watch_timeout_s: int = 30, **kw: object
) -> Informer:
    """Pods of the test's namespace, as the scheduler's ServiceAccount, through the proxy."""
    core = client.CoreV1Api(proxy.client(scene.tessera.scheduler_token))
    target = WatchTarget("Pod", core.list_namespaced_pod, (scene.ns,), **kw)  # type: ignore[arg-type]
    informer = Informer(
        target,
        queue.put,
        backoff=Backoff(initial_s=0.05, max_s=0.2),
        watch_timeout_s=watch_timeout_s,
        page_size=2,
    )
    scene.on_cleanup(informer.stop)
    return informer


def _seen(events: list[ResourceEvent]) -> list[tuple[str, str]]:
    return [(e.type, e.key.split("/", 1)[1]) for e in events]


def test_lists_in_pages_then_streams_changes(scene: Scene, fault_proxy: FaultProxy) -> None:
    for name in ("a", "b", "c"):
        scene.create_pod(pod_body(name))
    queue = EventQueue()
    informer = _informer(scene, fault_proxy, queue).start()
    assert informer.synced.wait(10)
    assert sorted(_seen(queue.drain())) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    lists = [r for r in fault_proxy.requests_matching("GET", f"/namespaces/{scene.ns}/pods$") if not r.watch]
    assert [r.param("limit") for r in lists] == ["2", "2"] and lists[1].param("continue")
    scene.create_pod(pod_body("d"))
    scene.core.patch_namespaced_pod("a", scene.ns, {"metadata": {"labels": {"x": "1"}}})
    scene.core.delete_namespaced_pod("b", scene.ns)  # not bound: deleted at once
    got: list[ResourceEvent] = []
    wait_until(lambda: got.extend(queue.drain()) or ("DELETED", "b") in _seen(got))
    # The real server announces a deletion first (MODIFIED, with deletionTimestamp), even of an unbound pod.
    assert _seen(got) == [("ADDED", "d"), ("MODIFIED", "a"), ("MODIFIED", "b"), ("DELETED", "b")]
    assert got[2].obj["metadata"]["deletionTimestamp"]
    assert got[1].old is not None and got[1].old["metadata"].get("labels") in (None, {})
    assert sorted(k.split("/")[1] for k in informer.cache) == ["a", "c", "d"]


def _as_server_has_it(scene: Scene, name: str) -> dict[str, Any]:
    obj = json.loads(scene.core.read_namespaced_pod(name, scene.ns, _preload_content=False).data)
    assert obj["metadata"]["managedFields"]  # the server's bookkeeping, which the cache leaves out
    return obj


def _without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}


def test_slim_drops_managed_fields_and_keeps_everything_else(scene: Scene, fault_proxy: FaultProxy) -> None:
    # A real owner: the garbage collector deletes pods whose owner does not exist.
    cm = scene.core.create_namespaced_config_map(scene.ns, {"metadata": {"name": "owner"}})
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": cm.metadata.uid}
    long_value = "x" * 200  # longer than what is interned: kept as it came all the same
    for name in ("a", "b"):
        body = pod_body(name, labels={"app": "train"}, annotations={"note": long_value},
                        limits={"nvidia.com/gpu": "1"})  # fmt: skip
        body["metadata"]["ownerReferences"] = [owner]
        scene.create_pod(body)
    queue = EventQueue()
    informer = _informer(scene, fault_proxy, queue, transform=slim).start()
    assert informer.synced.wait(10)
    a, b = informer.get(f"{scene.ns}/a"), informer.get(f"{scene.ns}/b")
    assert a is not None and b is not None
    # Listed: everything a consumer reads is there (metadata, spec, status), only managedFields is gone.
    # (A list's items carry no apiVersion and kind; a GET's object and a watch's do.)
    listed = {k: v for k, v in _as_server_has_it(scene, "a").items() if k not in ("apiVersion", "kind")}
    assert a == _without_managed_fields(listed)
    assert a["metadata"]["ownerReferences"][0]["uid"] == owner["uid"]
    assert a["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    # Repeated strings are shared between the cached objects, not held once per pod.
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["spec"]["containers"][0]["image"] is b["spec"]["containers"][0]["image"]
    # Watched: the changed object, as the consumer gets it and as the cache keeps it, slimmed the same way.
    queue.drain()
    scene.core.patch_namespaced_pod("a", scene.ns, {"metadata": {"labels": {"step": "2"}}})
    got: list[ResourceEvent] = []
    wait_until(lambda: got.extend(queue.drain()) or bool(got))
    (event,) = got
    assert event.type == "MODIFIED" and event.obj is informer.get(f"{scene.ns}/a")
    assert event.obj == _without_managed_fields(_as_server_has_it(scene, "a"))
    assert event.obj["metadata"]["labels"] == {"app": "train", "step": "2"}
    assert event.old is a


def test_field_selector_and_bookmarks_advance_resource_version(scene: Scene, fault_proxy: FaultProxy) -> None:
    queue = EventQueue()
    # The server sends a bookmark about 2 s before a watch's timeout (a short timeout makes one come soon),
    # carrying the resourceVersion its pod watch cache has reached.
    informer = _informer(
        scene, fault_proxy, queue, watch_timeout_s=4, field_selector="spec.schedulerName=tessera"
    )
    informer.start()
    assert informer.synced.wait(10)
    scene.create_pod(pod_body("ours"))
    wait_until(lambda: f"{scene.ns}/ours" in informer.cache)
    theirs = scene.create_pod(pod_body("theirs", scheduler="default-scheduler"))  # filtered out by the server
    after_theirs = int(theirs["metadata"]["resourceVersion"])
    # Only a bookmark can tell the informer that the history moved past the pods it watches.
    wait_until(lambda: int(informer.resource_version) >= after_theirs, timeout=15)
    assert f"{scene.ns}/theirs" not in informer.cache
    assert _seen(queue.drain()) == [("ADDED", "ours")]


def test_relists_on_410_and_emits_only_the_difference(scene: Scene, fault_proxy: FaultProxy) -> None:
    scene.create_pod(pod_body("keep"))
    scene.create_pod(pod_body("drop"))
    queue = EventQueue()
    informer = _informer(scene, fault_proxy, queue).start()
    assert informer.synced.wait(10)
    path = f"/namespaces/{scene.ns}/pods$"
    wait_until(lambda: fault_proxy.watching(path))
    queue.drain()
    rv_before = informer.resource_version
    # The watch is lost and every re-watch fails (503, backoff) while the world changes; then the history
    # is compacted: the next re-watch is told 410 Expired, and the informer relists.
    fault_proxy.fail("GET", path, 503, watch=True, times=1000)
    assert fault_proxy.drop_watches(path) == 1
    scene.core.delete_namespaced_pod("drop", scene.ns)
    scene.create_pod(pod_body("new"))
    wait_until(lambda: [r for r in fault_proxy.requests_matching("GET", path) if r.injected])
    fault_proxy.clear()
    fault_proxy.expire_watches(path)
    wait_until(lambda: informer.lists >= 2)
    got: list[ResourceEvent] = []
    wait_until(lambda: got.extend(queue.drain()) or len(got) >= 2)
    # The watch was cut before it could deliver them: the relist emits exactly the difference.
    assert sorted(_seen(got)) == [("ADDED", "new"), ("DELETED", "drop")]
    assert informer.resource_version != rv_before and informer.errors >= 1
    watches = [r for r in fault_proxy.requests_matching("GET", path) if r.watch]
    injected = [r.status for r in watches if r.injected]
    assert set(injected[:-1]) == {503} and injected[-1] == 200  # ... then the 410 inside a 200 stream
    scene.create_pod(pod_body("after"))
    wait_until(lambda: f"{scene.ns}/after" in informer.cache)


def test_backoff_grows_and_resets() -> None:
    backoff = Backoff(initial_s=1, max_s=4, jitter=0)
    assert [backoff.next_delay() for _ in range(4)] == [1, 2, 4, 4]
    backoff.reset()
    assert backoff.next_delay() == 1
