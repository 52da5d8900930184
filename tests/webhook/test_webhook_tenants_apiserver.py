"""The webhook refuses a tenant's escapes (issue 27, findings 2, 3 and 4) on the real kube-apiserver, with the
chart's webhook configurations; the tenant is a ServiceAccount with the built-in `edit` role in its own
namespace, and what it gets back is what `kubectl` prints:

- a bound pod cannot change its pod group (finding 2: running pods annotated into `sink`);
- a PodGroup with running pods cannot change its queue, priority class or preemptibility (finding 3); a
  PodGroup whose pods do not run yet can;
- pods and PodGroups may only name queues open to their namespace (finding 4: `spec.namespaces`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from scheduler.api.keys import GROUP, POD_GROUP, VERSION
from scheduler.api.podgroup import PodGroupStatus
from scheduler.kube.event_queue import EventQueue
from scheduler.kube.informer import Informer, WatchTarget
from scheduler.kube.queue_index import informer_namespace_check, informer_queue_lookup
from scheduler.kube.status import PodGroupStatusWriter
from scheduler.webhook.admission import AdmissionConfig
from tests.controlplane import webhooks
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver


@pytest.fixture
def hooked(scene: Scene, tmp_path: Path) -> Scene:
    """The webhook with the scheduler's queue cache, the chart's configurations registered; queues `default`,
    `team-a` (open to this test's namespace) and `team-b` (open to another namespace only)."""
    scene.queue("default", {"namespaces": [scene.ns]})
    scene.queue("team-a", {"namespaces": [scene.ns]})
    scene.queue("team-b", {"namespaces": ["team-b"]})
    custom = client.CustomObjectsApi(scene.tessera.scheduler_client())
    queues = Informer(WatchTarget("Queue", custom.list_cluster_custom_object, (GROUP, VERSION, "queues")),
                      EventQueue().put).start()  # fmt: skip
    scene.on_cleanup(queues.stop)
    assert queues.synced.wait(10)
    wait_until(lambda: queues.get("team-b") is not None)
    config = AdmissionConfig(privileged_users=frozenset({scene.tessera.scheduler_user}),
                             queue_lookup=informer_queue_lookup(queues),
                             namespace_check=informer_namespace_check(queues))  # fmt: skip
    server = webhooks.start_server(scene, tmp_path / "certs", config)
    webhooks.register(scene, server.port)
    return scene


def kubectl(scene: Scene, kubeconfig: Path, *args: str, doc: dict[str, Any] | None = None) -> tuple[int, str]:
    done = scene.cp.kubectl(*args, "-n", scene.ns, kubeconfig=kubeconfig, check=False,
                            input=yaml.safe_dump(doc) if doc is not None else None)  # fmt: skip
    return done.returncode, (done.stderr or done.stdout).strip()


def group(scene: Scene, name: str, queue: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": scene.ns}, "spec": {"minMember": 1, "queue": queue, **spec}}  # fmt: skip


def test_a_bound_pod_cannot_change_its_pod_group(hooked: Scene) -> None:
    _, kubeconfig = hooked.tenant()
    for name in ("w0", "w1"):
        hooked.create_pod(pod_body(name, labels={"tessera.dev/queue": "team-a"}, namespace=hooked.ns))
    as_scheduler = client.CoreV1Api(hooked.tessera.scheduler_client())
    as_scheduler.create_namespaced_pod_binding("w0", hooked.ns, {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "w0"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"}}, _preload_content=False)  # fmt: skip
    code, err = kubectl(hooked, kubeconfig, "annotate", "pod", "w0", f"{POD_GROUP}=sink", "--overwrite")
    assert code == 1 and err.count("\n") == 0, err
    assert "the pod group of a bound pod cannot change (annotation tessera.dev/pod-group)" in err
    code, err = kubectl(hooked, kubeconfig, "annotate", "pod", "w1", f"{POD_GROUP}=sink", "--overwrite")
    assert code == 0, err  # a pending pod may still join a group


def test_a_running_podgroup_keeps_its_queue_priority_and_preemptibility(hooked: Scene) -> None:
    _, kubeconfig = hooked.tenant()
    for name in ("running", "waiting"):
        code, err = kubectl(hooked, kubeconfig, "apply", "-f", "-", doc=group(hooked, name, "team-a"))
        assert code == 0, err
    # What the scheduler writes once the group's pods run (its status subresource, which tenants cannot).
    writer = PodGroupStatusWriter(client.CustomObjectsApi(hooked.tessera.scheduler_client()), lambda _: None)
    assert writer.write(hooked.ns, "running", PodGroupStatus(phase="Running", running=2))
    wait_until(lambda: (hooked.get("podgroups", "running").get("status") or {}).get("running") == 2)
    for edit in ({"preemptibility": "non-preemptible"}, {"priorityClassName": "inference"},
                 {"queue": "default"}):  # fmt: skip
        patch = ["patch", "podgroup", "running", "--type=merge", "-p", yaml.safe_dump({"spec": edit})]
        code, err = kubectl(hooked, kubeconfig, *patch)
        field = next(iter(edit))
        assert code == 1 and f"has 2 running pods: its {field} cannot change while they run" in err, err
        code, err = kubectl(hooked, kubeconfig, "patch", "podgroup", "waiting", "--type=merge", "-p",
                            yaml.safe_dump({"spec": edit}))  # fmt: skip
        assert code == 0, err  # nothing of it runs yet
    code, err = kubectl(hooked, kubeconfig, "patch", "podgroup", "running", "--type=merge", "-p",
                        '{"spec": {"minMember": 3}}')  # fmt: skip
    assert code == 0, err  # its size may change (an elastic gang)


def test_pods_and_podgroups_may_only_name_queues_open_to_their_namespace(hooked: Scene) -> None:
    _, kubeconfig = hooked.tenant()
    theirs = pod_body("steal", labels={"tessera.dev/queue": "team-b"}, namespace=hooked.ns)
    code, err = kubectl(hooked, kubeconfig, "apply", "-f", "-", doc=theirs)
    assert code == 1 and f"namespace {hooked.ns} may not use queue team-b" in err, err
    code, err = kubectl(hooked, kubeconfig, "apply", "-f", "-", doc=group(hooked, "steal", "team-b"))
    assert code == 1 and f"namespace {hooked.ns} may not use queue team-b" in err, err
    code, err = kubectl(hooked, kubeconfig, "apply", "-f", "-", doc=group(hooked, "ours", "team-a"))
    assert code == 0, err
    code, err = kubectl(hooked, kubeconfig, "patch", "podgroup", "ours", "--type=merge", "-p",
                        '{"spec": {"queue": "team-b"}}')  # fmt: skip
    assert code == 1 and "may not use queue team-b" in err, err
    mine = pod_body("mine", labels={"tessera.dev/queue": "team-a"}, namespace=hooked.ns)
    code, err = kubectl(hooked, kubeconfig, "apply", "-f", "-", doc=mine)
    assert code == 0, err
