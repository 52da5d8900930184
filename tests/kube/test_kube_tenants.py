"""A tenant cannot escape its queue (issue 27, findings 2 and 3), on the real kube-apiserver, played as the
issue's adversary: a ServiceAccount with the built-in `edit` role in its own namespace. These run without
the admission webhook (a cluster without it, or with failurePolicy Ignore and the webhook down): the
scheduler alone keeps what a running job was admitted with. tests/webhook/test_webhook_tenants_apiserver.py
has the webhook refusing the same edits.

- finding 2: running pods annotated into another job (a PodGroup `sink` in queue `default`) stay charged
  to their queue: its limit still holds, `kubectl get queue` still shows them;
- finding 3: running gangs whose PodGroups are patched to `non-preemptible`, or to a non-preemptible
  priority class, after they started are still reclaimed for a queue below its quota.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from scheduler.api.keys import GROUP, POD_GROUP, VERSION
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver

UNLIMITED = {"quota": -1, "limit": -1}


def whole(
    scene: Scene, name: str, queue: str, *, group: str | None = None, priority: str = "train"
) -> dict[str, Any]:
    body = pod_body(name, labels={"tessera.dev/queue": queue}, limits={"nvidia.com/gpu": "1"},
                    annotations={POD_GROUP: group} if group else None, namespace=scene.ns)  # fmt: skip
    body["spec"]["priorityClassName"] = priority
    return body


def allocated(scene: Scene, queue: str) -> float:
    status = scene.get("queues", queue, namespaced=False).get("status") or {}
    return float((status.get("allocated") or {}).get("gpu", 0))


def test_running_pods_annotated_into_another_job_stay_charged_to_their_queue(scene: Scene) -> None:
    scene.node("gpu-1", gpus=8)
    scene.queue("default", {"resources": {"gpu": UNLIMITED}})
    scene.queue("a", {"resources": {"gpu": {"quota": 0, "limit": 2}}})
    api, _ = scene.tenant()
    pods = client.CoreV1Api(api)
    groups = client.CustomObjectsApi(api)
    groups.create_namespaced_custom_object(GROUP, VERSION, scene.ns, "podgroups", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": "sink"},
        "spec": {"minMember": 1, "queue": "default"}})  # fmt: skip
    kubelet = scene.kubelet()
    runner = scene.scheduler()
    pods.create_namespaced_pod(scene.ns, whole(scene, "s0", "default", group="sink"))  # sink runs first
    wait_until(lambda: "s0" in scene.bound())
    for i in range(6):
        pods.create_namespaced_pod(scene.ns, whole(scene, f"w{i}", "a"))
    wait_until(lambda: len(kubelet.allocated) == 3, timeout=20)
    wait_until(lambda: allocated(scene, "a") == 2)
    for _ in range(3):  # the escape, again and again: a's running pods join `sink`, in queue `default`
        for name in sorted(n for n in scene.bound() if n.startswith("w")):
            pods.patch_namespaced_pod(name, scene.ns, {"metadata": {"annotations": {POD_GROUP: "sink"}}})
        until = runner.cycles + 10
        wait_until(lambda: runner.cycles >= until, timeout=30)  # noqa: B023 (called at once)
    assert sorted(scene.bound()) == ["s0", "w0", "w1"]  # a's limit holds: nothing more from a runs
    assert allocated(scene, "a") == 2 and allocated(scene, "default") == 1
    waiting = [p for p in scene.pods() if not p["spec"].get("nodeName")]
    assert len(waiting) == 4
    assert all("limit" in p["status"]["conditions"][0]["message"] for p in waiting), waiting[0]["status"]


def test_gangs_made_non_preemptible_after_they_started_are_still_reclaimed(scene: Scene) -> None:
    scene.node("gpu-1", gpus=8)
    scene.queue("default", {"resources": {"gpu": UNLIMITED}})
    scene.queue("a", {"resources": {"gpu": {"quota": 2, "limit": -1}}})
    scene.queue("b", {"resources": {"gpu": {"quota": 6, "limit": -1}}})
    api, _ = scene.tenant()
    pods, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for g in range(4):
        custom.create_namespaced_custom_object(GROUP, VERSION, scene.ns, "podgroups", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": f"a{g}"},
            "spec": {"minMember": 2, "queue": "a", "priorityClassName": "train"}})  # fmt: skip
        for m in range(2):
            pods.create_namespaced_pod(scene.ns, whole(scene, f"a{g}-{m}", "a", group=f"a{g}"))
    kubelet = scene.kubelet()
    runner = scene.scheduler()
    wait_until(lambda: len(kubelet.allocated) == 8, timeout=30)
    wait_until(lambda: all(scene.get("podgroups", f"a{g}").get("status", {}).get("running") == 2
                           for g in range(4)))  # fmt: skip
    # The escape: every gang made non-preemptible, two by preemptibility, two by priority class.
    for g in range(4):
        edit = {"preemptibility": "non-preemptible"} if g < 2 else {"priorityClassName": "inference"}
        custom.patch_namespaced_custom_object(GROUP, VERSION, scene.ns, "podgroups", f"a{g}", {"spec": edit})
    cycles = runner.cycles
    wait_until(lambda: runner.cycles >= cycles + 3)
    for i in range(6):
        pods.create_namespaced_pod(scene.ns, whole(scene, f"b{i}", "b"))
    wait_until(lambda: sum(1 for n in scene.bound() if n.startswith("b")) == 6, timeout=40)
    assert sum(1 for n in scene.bound() if n.startswith("a")) == 2  # one gang left: a's quota
