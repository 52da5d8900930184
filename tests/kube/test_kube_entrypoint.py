"""`tessera-scheduler` as a process: kubeconfig in, pods bound, /metrics served, clean exit on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.fakes.kubeapi import FakeKubeAPI
from tests.kube.helpers import FakeKubelet, node_body, pod_body, wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_scheduler_process(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{kube_api.url}'}}}}]\n"
        "users: [{name: me, user: {token: test}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: me}}]\n"
    )
    kube_api.seed(node_body("gpu-1", gpus=1))
    port = _free_port()
    env = {**os.environ, "TESSERA_LOG_LEVEL": "WARNING"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler.kube.main", "--kubeconfig", str(kubeconfig), "--no-leader-elect",
         "--cycle-interval", "0.1", "--metrics-port", str(port), "--identity", "proc-1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    kubelet = FakeKubelet(kube_api).start()
    try:
        kube_api.seed(pod_body("p", annotations={"gpu-fraction": "0.5"}))
        wait_for(lambda: kube_api.get("pods", "p")["spec"].get("nodeName") == "gpu-1", timeout=20)

        def scraped() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                return 'tessera_pods_scheduled_total{action="allocate"} 1.0' in resp.read().decode()

        wait_for(scraped, timeout=5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        kubelet.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
