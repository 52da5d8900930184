"""LeaderWorkerSet's pod webhook, for the real API server tests: the StatefulSet controller creates LWS pods,
and LWS's mutating webhook labels them at admission (`pkg/webhooks/pod_webhook.go`, `Default`): a leader
(worker-index "0") gets `group-index` = its StatefulSet ordinal, a worker gets `worker-index` = its
ordinal. Served over HTTPS with a certificate of the test control plane's CA and registered with a
MutatingWebhookConfiguration limited to pods labelled `leaderworkerset.sigs.k8s.io/name`.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes import client

from scheduler.sandbox.controlplane import ControlPlane

NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def lws_patch(pod: dict[str, Any]) -> list[dict[str, Any]]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    match = re.search(r"-(\d+)$", str((pod.get("metadata") or {}).get("name") or ""))
    if NAME_LABEL not in labels or match is None:
        return []
    key = GROUP_INDEX if labels.get(WORKER_INDEX) == "0" else WORKER_INDEX
    if key in labels:
        return []
    return [{"op": "add", "path": f"/metadata/labels/{_escape(key)}", "value": match.group(1)}]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        request = review.get("request") or {}
        response: dict[str, Any] = {"uid": request.get("uid"), "allowed": True}
        patch = lws_patch(request.get("object") or {})
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        body = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class LwsPodWebhook:
    def __init__(self, cp: ControlPlane, name: str) -> None:
        self.cp, self.name = cp, name
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        serving = cp.ca.issue(
            f"lws-webhook-{name}", common_name="lws-webhook", hosts=("127.0.0.1",), server=True
        )
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(str(serving.cert), str(serving.key))
        self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(target=self.server.serve_forever, name="lws-webhook", daemon=True)

    def start(self, namespace: str) -> LwsPodWebhook:
        self._thread.start()
        port = self.server.server_address[1]
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [{
                "name": "mpod.lws.x-k8s.io",
                "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate--v1-pod",
                                 "caBundle": base64.b64encode(self.cp.ca_file.read_bytes()).decode()},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["pods"]}],
                "objectSelector": {"matchExpressions": [{"key": NAME_LABEL, "operator": "Exists"}]},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Fail",
                "timeoutSeconds": 10,
            }],
        }  # fmt: skip
        client.AdmissionregistrationV1Api(self.cp.client()).create_mutating_webhook_configuration(body)
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
