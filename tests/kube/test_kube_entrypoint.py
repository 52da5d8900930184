"""`tessera-scheduler` as a process, with the flags the Helm chart passes: kubeconfig in, pods bound,
/metrics, /healthz, /readyz and /ui served, the webhook on HTTPS, the lease released on SIGTERM."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from scheduler.kube.main import own_service_account
from tests.fakes.kubeapi import FakeKubeAPI
from tests.kube.helpers import FakeKubelet, node_body, pod_body, wait_for
from tests.webhook.test_webhook_admission import REVIEW


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_own_service_account_from_the_token(tmp_path: Path) -> None:
    claims = {"sub": "system:serviceaccount:tessera-system:tessera-scheduler", "aud": ["x"]}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    token = tmp_path / "token"
    token.write_text(f"eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln")
    assert own_service_account(token) == "system:serviceaccount:tessera-system:tessera-scheduler"
    token.write_text("not-a-jwt")
    assert own_service_account(token) is None
    assert own_service_account(tmp_path / "missing") is None


def test_scheduler_process(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the webhook's certificate")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp_path / "tls.key"),
                    "-out", str(tmp_path / "tls.crt")], check=True, capture_output=True)  # fmt: skip
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{kube_api.url}'}}}}]\n"
        "users: [{name: me, user: {token: test}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: me}}]\n"
    )
    kube_api.seed(node_body("gpu-1", gpus=1))
    kube_api.seed(
        {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "team-a"}}
    )
    port, hook = _free_port(), _free_port()
    env = {**os.environ, "TESSERA_LOG_LEVEL": "WARNING"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler.kube.main", "--kubeconfig", str(kubeconfig),
         "--scheduler-name=tessera", f"--listen=127.0.0.1:{port}", "--cycle-period=100ms", "--log-level=warning",
         "--leader-elect", "--leader-elect-namespace=kube-system", "--leader-elect-lease-name=tessera-scheduler",
         "--leader-elect-identity=proc-1", f"--webhook-listen=127.0.0.1:{hook}", f"--webhook-cert-dir={tmp_path}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    kubelet = FakeKubelet(kube_api).start()
    base = f"http://127.0.0.1:{port}"
    try:
        kube_api.seed(pod_body("p", annotations={"gpu-fraction": "0.5"}))
        wait_for(lambda: kube_api.get("pods", "p")["spec"].get("nodeName") == "gpu-1", timeout=20)
        wait_for(lambda: 'tessera_pods_scheduled_total{action="allocate"} 1.0' in _get(base + "/metrics")[1])
        assert _get(base + "/healthz") == (200, "ok") and _get(base + "/readyz") == (200, "ok")
        status, page = _get(base + "/ui")
        assert status == 200 and "<html" in page.lower()
        assert _get(base + "/nope")[0] == 404
        assert (
            kube_api.get("leases", "tessera-scheduler", "kube-system")["spec"]["holderIdentity"] == "proc-1"
        )
        context = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))

        def review(body: dict[str, object]) -> dict[str, object]:
            req = urllib.request.Request(f"https://127.0.0.1:{hook}/mutate-pods", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})  # fmt: skip
            with urllib.request.urlopen(req, timeout=5, context=context) as resp:
                answer: dict[str, object] = json.loads(resp.read())["response"]
                return answer

        assert review(REVIEW)["patchType"] == "JSONPatch"  # queue team-a exists (from the watch cache)
        unknown = json.loads(json.dumps(REVIEW))
        unknown["request"]["object"]["metadata"]["labels"]["tessera.dev/queue"] = "nope"
        assert review(unknown)["allowed"] is False
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, proc.stdout.read().decode() if proc.stdout else ""
        assert kube_api.get("leases", "tessera-scheduler", "kube-system")["spec"]["holderIdentity"] == ""
    finally:
        kubelet.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
