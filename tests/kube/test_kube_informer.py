"""The informer against the fake API server: list, watch, bookmarks, relist on 410, backoff."""

from __future__ import annotations

from kubernetes import client

from scheduler.kube.backoff import Backoff
from scheduler.kube.event_queue import EventQueue, ResourceEvent
from scheduler.kube.informer import Informer, WatchTarget
from tests.fakes.kubeapi import FakeKubeAPI
from tests.kube.helpers import pod_body, wait_for


def _informer(kube_api: FakeKubeAPI, queue: EventQueue, **kw: object) -> Informer:
    core = client.CoreV1Api(kube_api.client())
    target = WatchTarget("Pod", core.list_pod_for_all_namespaces, **kw)  # type: ignore[arg-type]
    return Informer(
        target, queue.put, backoff=Backoff(initial_s=0.05, max_s=0.2), watch_timeout_s=5, page_size=2
    )


def _seen(events: list[ResourceEvent]) -> list[tuple[str, str]]:
    return [(e.type, e.key) for e in events]


def test_lists_in_pages_then_streams_changes(kube_api: FakeKubeAPI) -> None:
    for name in ("a", "b", "c"):
        kube_api.seed(pod_body(name))
    queue = EventQueue()
    informer = _informer(kube_api, queue).start()
    try:
        assert informer.synced.wait(5)
        assert sorted(_seen(queue.drain())) == [
            ("ADDED", "default/a"),
            ("ADDED", "default/b"),
            ("ADDED", "default/c"),
        ]
        lists = kube_api.requests_matching("GET", "/api/v1/pods$")
        assert [r.param("limit") for r in lists[:2]] == ["2", "2"] and lists[1].param("continue")
        kube_api.seed(pod_body("d"))
        kube_api.modify("pods", "a", lambda p: p["metadata"]["labels"].update(x="1"))
        kube_api.remove("pods", "b")
        got: list[ResourceEvent] = []
        wait_for(lambda: got.extend(queue.drain()) or len(got) >= 3)
        assert _seen(got) == [("ADDED", "default/d"), ("MODIFIED", "default/a"), ("DELETED", "default/b")]
        assert got[1].old is not None and got[1].old["metadata"]["labels"] == {}
        assert sorted(informer.cache) == ["default/a", "default/c", "default/d"]
    finally:
        informer.stop()


def test_field_selector_and_bookmarks_advance_resource_version(kube_api: FakeKubeAPI) -> None:
    queue = EventQueue()
    informer = _informer(kube_api, queue, field_selector="spec.schedulerName=tessera").start()
    try:
        assert informer.synced.wait(5)
        kube_api.seed(pod_body("ours"))
        kube_api.seed(pod_body("theirs", scheduler="default-scheduler"))
        wait_for(lambda: "default/ours" in informer.cache)
        kube_api.seed(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "noise", "namespace": "default"}}
        )
        rv_after_noise = str(kube_api.resource_version)
        wait_for(lambda: informer.resource_version == rv_after_noise)  # only a bookmark can tell us
        assert "default/theirs" not in informer.cache
        assert _seen(queue.drain()) == [("ADDED", "default/ours")]
    finally:
        informer.stop()


def test_relists_on_410_and_emits_only_the_difference(kube_api: FakeKubeAPI) -> None:
    kube_api.seed(pod_body("keep"))
    kube_api.seed(pod_body("drop"))
    queue = EventQueue()
    informer = _informer(kube_api, queue).start()
    try:
        assert informer.synced.wait(5)
        queue.drain()
        informer_rv_before = informer.resource_version
        # While the watch is down, the world changes and the history is compacted.
        kube_api.fail_next("GET", r"/api/v1/pods$", code=503, times=1)
        kube_api.drop_watches()
        kube_api.remove("pods", "drop")
        kube_api.seed(pod_body("new"))
        kube_api.expire_history()
        wait_for(lambda: informer.lists >= 2)
        got: list[ResourceEvent] = []
        wait_for(lambda: got.extend(queue.drain()) or len(got) >= 2)
        assert sorted(_seen(got)) == [("ADDED", "default/new"), ("DELETED", "default/drop")]
        assert informer.resource_version != informer_rv_before and informer.errors >= 1
        watches = [r for r in kube_api.requests_matching("GET", r"/api/v1/pods$") if r.param("watch")]
        assert any(r.status == 503 for r in watches) or informer.errors >= 1
        kube_api.seed(pod_body("after"))
        wait_for(lambda: "default/after" in informer.cache)
    finally:
        informer.stop()


def test_backoff_grows_and_resets() -> None:
    backoff = Backoff(initial_s=1, max_s=4, jitter=0)
    assert [backoff.next_delay() for _ in range(4)] == [1, 2, 4, 4]
    backoff.reset()
    assert backoff.next_delay() == 1
