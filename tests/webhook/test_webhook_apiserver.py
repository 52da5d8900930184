"""The admission webhook called by the real kube-apiserver, with the chart's webhook configurations (rules,
matchConditions, failure policy) pointing at a WebhookServer on loopback with a certificate from the
sandbox CA: what a user sees from `kubectl` is what the API server makes of our answers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client

from scheduler.api.keys import GPU_ASSIGNMENT, GPU_SLICE_RESOURCE, GROUP, VERSION
from scheduler.kube.event_queue import EventQueue
from scheduler.kube.informer import Informer, WatchTarget
from scheduler.kube.queue_index import informer_queue_lookup
from scheduler.webhook.admission import AdmissionConfig
from tests.controlplane import webhooks
from tests.controlplane.scene import Scene
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver


@pytest.fixture
def hooked(scene: Scene, tmp_path: Path) -> Scene:
    """The webhook serving with the scheduler's queue cache; the chart's configurations registered. The
    queue `default` exists, as the chart installs it (pods without a queue label go there)."""
    scene.queue("default")
    custom = client.CustomObjectsApi(scene.tessera.scheduler_client())
    queues = Informer(WatchTarget("Queue", custom.list_cluster_custom_object, (GROUP, VERSION, "queues")),
                      EventQueue().put).start()  # fmt: skip
    scene.on_cleanup(queues.stop)
    assert queues.synced.wait(10)
    config = AdmissionConfig(privileged_users=frozenset({scene.tessera.scheduler_user}),
                             queue_lookup=informer_queue_lookup(queues))  # fmt: skip
    server = webhooks.start_server(scene, tmp_path / "certs", config)
    webhooks.register(scene, server.port)
    return scene


def apply(scene: Scene, body: dict[str, object]) -> tuple[int, str]:
    """`kubectl apply` as a user would type it: exit code and stderr."""
    doc = {**body, "metadata": {**body["metadata"], "namespace": scene.ns}}  # type: ignore[dict-item]
    done = scene.cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc), check=False)
    return done.returncode, done.stderr.strip()


def test_a_fractional_pod_is_stored_with_the_slice_limit(hooked: Scene) -> None:
    code, err = apply(hooked, pod_body("infer", annotations={"gpu-fraction": "0.5"}))
    assert code == 0, err
    (container,) = hooked.pod("infer")["spec"]["containers"]
    assert container["resources"]["limits"][GPU_SLICE_RESOURCE] == "1"
    assert container["resources"]["requests"][GPU_SLICE_RESOURCE] == "1"  # defaulted from the limit


def test_invalid_requests_are_refused_with_a_one_line_reason(hooked: Scene) -> None:
    code, err = apply(hooked, pod_body("bad", annotations={"gpu-fraction": "1.5"}))
    assert code == 1 and err.count("\n") == 0, err
    assert 'admission webhook "pods.mutate.tessera.dev" denied the request' in err  # the first to see it
    assert 'gpu-fraction="1.5" must be strictly between 0 and 1' in err
    assert hooked.find_pod("bad") is None


def test_queues_are_checked_against_the_cluster(hooked: Scene) -> None:
    hooked.queue("org-hook")
    hooked.queue("team-hook", {"parentQueue": "org-hook"})
    labels = {"tessera.dev/queue": "nope"}
    code, err = apply(hooked, pod_body("lost", labels=labels, annotations={"gpu-fraction": "0.5"}))
    assert code == 1 and "nope" in err, err
    code, err = apply(hooked, pod_body("parent", labels={"tessera.dev/queue": "org-hook"}))
    assert code == 1 and "org-hook" in err, err
    code, err = apply(hooked, pod_body("leaf", labels={"tessera.dev/queue": "team-hook"}))
    assert code == 0, err


def test_other_schedulers_pods_never_reach_the_webhook(hooked: Scene) -> None:
    """The chart's matchConditions keep the rest of the cluster independent of the webhook."""
    code, err = apply(
        hooked, pod_body("theirs", scheduler="default-scheduler", annotations={"gpu-fraction": "7"})
    )
    assert code == 0, err
    assert GPU_SLICE_RESOURCE not in (
        hooked.pod("theirs")["spec"]["containers"][0].get("resources") or {}
    ).get("limits", {})


def test_only_the_scheduler_may_write_the_assignment(hooked: Scene) -> None:
    hooked.create_pod(pod_body("p", annotations={"gpu-fraction": "0.5"}))
    value = '{"node":"n1","gpus":[{"index":0,"uuid":"GPU-0","milli":500,"memoryMiB":40960}]}'
    patch = {"metadata": {"annotations": {GPU_ASSIGNMENT: value}}}
    with pytest.raises(client.ApiException) as refused:
        hooked.core.patch_namespaced_pod("p", hooked.ns, patch)  # the cluster admin, but not the scheduler
    # Both validating hooks see it (pods.validate takes every UPDATE of a Tessera pod): either refuses.
    assert "only the Tessera scheduler may set annotation tessera.dev/gpu-assignment" in refused.value.body
    assert GPU_ASSIGNMENT not in hooked.pod("p")["metadata"]["annotations"]
    as_scheduler = client.CoreV1Api(hooked.tessera.scheduler_client())
    as_scheduler.patch_namespaced_pod("p", hooked.ns, patch)
    assert hooked.pod("p")["metadata"]["annotations"][GPU_ASSIGNMENT] == value
    # Other annotation changes by anyone else are allowed.
    hooked.core.patch_namespaced_pod("p", hooked.ns, {"metadata": {"annotations": {"note": "x"}}})


def test_server_side_dry_runs_reach_the_webhook_and_store_nothing(hooked: Scene) -> None:
    """The chart declares `sideEffects: None`, so `--dry-run=server` is answered by our webhook too; the
    dry runs of a create, a patch and a delete leave the cluster as it was."""
    bad = yaml.safe_dump(pod_body("bad", annotations={"gpu-fraction": "0"}, namespace=hooked.ns))
    refused = hooked.cp.kubectl(
        "apply", "-n", hooked.ns, "--dry-run=server", "-f", "-", input=bad, check=False
    )
    assert refused.returncode == 1 and 'gpu-fraction="0"' in refused.stderr
    good = yaml.safe_dump(pod_body("good", annotations={"gpu-fraction": "0.5"}, namespace=hooked.ns))
    shown = hooked.cp.kubectl(
        "apply", "-n", hooked.ns, "--dry-run=server", "-o", "yaml", "-f", "-", input=good
    )
    assert f'{GPU_SLICE_RESOURCE}: "1"' in shown.stdout  # what would be stored, mutated by the webhook
    assert hooked.find_pod("good") is None
    hooked.podgroup("g", {"minMember": 2})
    hooked.cp.kubectl("patch", "podgroup", "g", "-n", hooked.ns, "--type=merge", "--dry-run=server",
                      "-p", '{"spec": {"minMember": 5}}')  # fmt: skip
    hooked.cp.kubectl("delete", "podgroup", "g", "-n", hooked.ns, "--dry-run=server")
    assert hooked.get("podgroups", "g")["spec"]["minMember"] == 2
