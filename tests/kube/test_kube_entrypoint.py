"""`tessera-scheduler` as a process on the real API server, with the flags the Helm chart passes: its
ServiceAccount's kubeconfig, pods bound, /metrics, /healthz, /readyz and /ui served, the webhook on HTTPS
called by the API server, the lease released on SIGTERM."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from scheduler.kube.main import own_service_account
from tests.controlplane import webhooks
from tests.controlplane.install import LEASE_NAME, RELEASE_NAMESPACE
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except urllib.error.URLError as err:  # not listening (yet)
        return 0, str(err.reason)


def test_own_service_account_from_the_token(tmp_path: Path) -> None:
    claims = {"sub": "system:serviceaccount:tessera-system:tessera-scheduler", "aud": ["x"]}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    token = tmp_path / "token"
    token.write_text(f"eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln")
    assert own_service_account(token) == "system:serviceaccount:tessera-system:tessera-scheduler"
    token.write_text("not-a-jwt")
    assert own_service_account(token) is None
    assert own_service_account(tmp_path / "missing") is None


@pytest.mark.apiserver
def test_scheduler_process(scene: Scene, tmp_path: Path) -> None:
    """The process as the chart runs it: its ServiceAccount's kubeconfig, leader election on the chart's
    Lease, the webhook on HTTPS called by the API server through the chart's configurations."""
    certs = webhooks.serving_cert(scene, tmp_path / "certs")
    scene.node("gpu-1", gpus=1)
    scene.queue("default")  # as the chart installs it: pods without a queue label go there
    scene.queue("team-a")
    coordination = client.CoordinationV1Api(scene.admin)
    with contextlib.suppress(client.ApiException):
        coordination.delete_namespaced_lease(LEASE_NAME, RELEASE_NAMESPACE)
    port, hook = _free_port(), _free_port()
    env = {**os.environ, "TESSERA_LOG_LEVEL": "WARNING"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler.kube.main", "--kubeconfig", str(scene.tessera.scheduler_kubeconfig),
         "--scheduler-name=tessera", f"--listen=127.0.0.1:{port}", "--cycle-period=100ms", "--log-level=warning",
         "--leader-elect", f"--leader-elect-namespace={RELEASE_NAMESPACE}", f"--leader-elect-lease-name={LEASE_NAME}",
         "--leader-elect-identity=proc-1", f"--webhook-listen=127.0.0.1:{hook}", f"--webhook-cert-dir={certs}",
         f"--webhook-allowed-users={scene.tessera.scheduler_user}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    scene.kubelet()
    base = f"http://127.0.0.1:{port}"

    def holder() -> str | None:
        spec = coordination.read_namespaced_lease(LEASE_NAME, RELEASE_NAMESPACE).spec
        return spec.holder_identity if spec else None

    try:
        wait_until(lambda: _get(base + "/readyz") == (200, "ok"), timeout=30)
        webhooks.register(scene, hook)
        scene.create_pod(
            pod_body("p", labels={"tessera.dev/queue": "team-a"}, annotations={"gpu-fraction": "0.5"})
        )
        pod = scene.pod("p")  # as the API server stored it, after our mutating webhook
        assert pod["spec"]["containers"][0]["resources"]["limits"]["tessera.dev/gpu-slice"] == "1"
        wait_until(lambda: scene.pod("p")["spec"].get("nodeName") == "gpu-1", timeout=20)
        wait_until(
            lambda: 'tessera_pods_scheduled_total{action="allocate"} 1.0' in _get(base + "/metrics")[1]
        )
        assert _get(base + "/healthz") == (200, "ok")
        status, page = _get(base + "/ui")
        assert status == 200 and "<html" in page.lower()
        assert _get(base + "/nope")[0] == 404
        assert holder() == "proc-1"
        bad = scene.cp.kubectl("run", "bad", "-n", scene.ns, "--image=busybox", "--annotations=gpu-fraction=abc",
                               "--overrides", '{"spec": {"schedulerName": "tessera"}}', check=False)  # fmt: skip
        assert bad.returncode == 1 and 'gpu-fraction="abc"' in bad.stderr, bad.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, proc.stdout.read().decode() if proc.stdout else ""
        assert holder() == ""  # released on the way out: a standby takes over at once
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
