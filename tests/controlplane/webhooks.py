"""The chart's admission webhook configurations, registered on the test's control plane so the API server
itself calls Tessera's webhook: rules, matchConditions, failure policy and timeouts as the chart renders
them; only the client config differs (a URL on loopback instead of the in-cluster Service, with the
sandbox CA as caBundle) and every webhook is confined to the test's namespace, so that no other test's
pods depend on this test's webhook server.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

from kubernetes import client

from scheduler.webhook.admission import AdmissionConfig
from scheduler.webhook.server import WebhookServer
from tests.controlplane.install import chart_objects
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

KINDS = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
         "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}  # fmt: skip


def serving_cert(scene: Scene, folder: Path) -> Path:
    """tls.crt and tls.key for a webhook on 127.0.0.1, from the sandbox CA, in `folder` (as the chart's
    Secret mounts them)."""
    files = scene.cp.ca.issue(f"webhook-{scene.ns}", common_name="tessera-webhook", hosts=("127.0.0.1",),
                              server=True)  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tls.crt").write_bytes(files.cert.read_bytes())
    (folder / "tls.key").write_bytes(files.key.read_bytes())
    return folder


def register(scene: Scene, port: int) -> list[dict[str, Any]]:
    """Create the chart's webhook configurations pointing at https://127.0.0.1:`port`; wait until the API
    server calls them (its configuration cache lags a little behind the write)."""
    ca_bundle = base64.b64encode(scene.cp.ca.pem).decode()
    admission = client.AdmissionregistrationV1Api(scene.admin)
    made = []
    for doc in chart_objects(set(KINDS)):
        config = copy.deepcopy(doc)
        config["metadata"] = {"name": f"tessera-{scene.ns}"}
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": scene.ns}}
        scene.track(KINDS[config["kind"]], config["metadata"]["name"])
        if config["kind"] == "MutatingWebhookConfiguration":
            admission.create_mutating_webhook_configuration(config)
        else:
            admission.create_validating_webhook_configuration(config)
        made.append(config)

    def refused() -> bool:  # a dry run reaches admission but stores nothing
        try:
            scene.core.create_namespaced_pod(scene.ns, pod_body("probe", annotations={"gpu-fraction": "2"}),
                                             dry_run="All")  # fmt: skip
        except client.ApiException as exc:
            return exc.status in (400, 403)
        return False

    wait_until(refused, timeout=20)
    return made


def start_server(scene: Scene, folder: Path, config: AdmissionConfig) -> WebhookServer:
    certs = serving_cert(scene, folder)
    server = WebhookServer(config, certfile=str(certs / "tls.crt"), keyfile=str(certs / "tls.key"),
                           host="127.0.0.1", port=0).start()  # fmt: skip
    scene.on_cleanup(server.stop)
    return server
