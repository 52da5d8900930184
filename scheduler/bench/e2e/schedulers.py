"""The scheduler under test, as a process of its own (its CPU and memory measured apart from the API
server's): `tessera-scheduler`, or the `kube-scheduler` of the same Kubernetes release with the client
settings scheduler_perf gives it (QPS and burst 5000)."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from scheduler.bench.e2e.config import CLIENT_BURST, CLIENT_QPS, E2EConfig
from scheduler.sandbox import assets
from scheduler.sandbox.controlplane import free_port
from scheduler.sandbox.processes import die_with_parent


class SchedulerDidNotStart(RuntimeError):
    """The scheduler process exited or never became ready; the message quotes its log."""


class SchedulerProcess:
    def __init__(self, cfg: E2EConfig, kubeconfig: Path, workdir: Path) -> None:
        self.cfg = cfg
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.log = workdir / f"{cfg.scheduler}.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def argv(self) -> list[str]:
        cfg = self.cfg
        if cfg.scheduler == "kube-scheduler":
            config = self.workdir / "kube-scheduler.yaml"
            config.write_text(yaml.safe_dump({
                "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": CLIENT_QPS, "burst": CLIENT_BURST},
                "leaderElection": {"leaderElect": False},
            }))  # fmt: skip
            return [str(assets.require(("kube-scheduler",)) / "kube-scheduler"), f"--config={config}",
                    f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                    "--bind-address=127.0.0.1", f"--secure-port={self.port}",
                    f"--cert-dir={self.workdir / 'kube-scheduler-certs'}", "--v=0"]  # fmt: skip
        argv = [sys.executable, "-m", "scheduler.kube.main", f"--kubeconfig={self.kubeconfig}",
                f"--listen=127.0.0.1:{self.port}", "--cycle-period=1s", f"--min-cycle-gap={cfg.min_cycle_gap_s}s",
                f"--bind-workers={cfg.bind_workers}", "--log-level=warning"]  # fmt: skip
        if cfg.policy:
            argv.append(f"--placement={cfg.policy}")
        if not cfg.whole_gpu_plugin:
            argv.append("--whole-gpu-resource=")
        return argv

    def start(self, timeout_s: float = 120.0, poll_s: float = 0.1) -> SchedulerProcess:
        with self.log.open("ab") as out:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, env=env,
                                         preexec_fn=die_with_parent)  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not self._ready():
            if self.proc.poll() is not None:
                raise SchedulerDidNotStart(
                    f"{self.cfg.scheduler} exited with {self.proc.returncode}: {self._tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise SchedulerDidNotStart(
                    f"{self.cfg.scheduler} not ready after {timeout_s:.0f} s: {self._tail()}"
                )
            time.sleep(poll_s)
        return self

    def _ready(self) -> bool:
        """Both answer /readyz once their watch caches are synced."""
        scheme = "https" if self.cfg.scheduler == "kube-scheduler" else "http"
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # kube-scheduler's serving certificate is self-signed
        try:
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{self.port}/readyz", timeout=2,
                                        context=insecure if scheme == "https" else None) as r:  # fmt: skip
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def _tail(self, lines: int = 12) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def metrics(self) -> str:
        """Tessera's /metrics text (Prometheus exposition)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return str(r.read().decode())

    def kill(self) -> None:
        """SIGKILL, as a node failure or an OOM kill ends a leader: nothing is released or written."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
