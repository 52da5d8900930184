"""`tessera sandbox status` and a second `up` on the running sandbox, as a user runs them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.sandbox.conftest import tessera
from tests.sandbox.env import SandboxEnv

pytestmark = pytest.mark.apiserver


def test_status_says_what_runs(sandbox: SandboxEnv, sandbox_env: tuple[Path, dict[str, str]]) -> None:
    data_dir, env = sandbox_env
    proc = tessera("sandbox", "status", f"--data-dir={data_dir}", "-o", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["api"] == "ready" and status["kubeconfig"] == sandbox.state.kubeconfig
    names = {p["name"] for p in status["processes"] if p["running"]}
    assert {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "tessera-scheduler",
    } <= names
    for node in ("gpu-node-1", "gpu-node-2"):
        assert {f"kubelet/{node}", f"fakecri/{node}", f"device-plugin/{node}", f"agent/{node}"} <= names


def test_a_second_up_refuses_with_one_line(
    sandbox: SandboxEnv, sandbox_env: tuple[Path, dict[str, str]]
) -> None:
    data_dir, env = sandbox_env
    proc = tessera("sandbox", "up", f"--data-dir={data_dir}", env=env)
    assert proc.returncode == 1
    assert (
        proc.stderr.strip()
        == f"error: a sandbox is already running in {data_dir} (tessera sandbox down first)"
    )


def test_the_sandbox_kubectl_is_the_control_planes_own(
    sandbox: SandboxEnv, sandbox_env: tuple[Path, dict[str, str]]
) -> None:
    """The machine's kubectl may be older than the control plane: `tessera sandbox kubectl` runs the one
    built with it, with the sandbox's kubeconfig; `tessera sandbox env` says how to make it the default."""
    data_dir, env = sandbox_env
    status = json.loads(tessera("sandbox", "status", f"--data-dir={data_dir}", "-o", "json", env=env).stdout)
    assert status["kubectl"] == str(sandbox.kubectl_bin) and status["scheduler_name"] == "tessera"
    proc = tessera("sandbox", "kubectl", f"--data-dir={data_dir}", "get", "nodes", "-o", "name", env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["node/gpu-node-1", "node/gpu-node-2"]
    version = tessera("sandbox", "kubectl", f"--data-dir={data_dir}", "version", "--client", env=env)
    assert sandbox.state.kubernetes_version in version.stdout
    lines = tessera("sandbox", "env", f"--data-dir={data_dir}", env=env).stdout.splitlines()
    assert lines == [
        f"export KUBECONFIG={sandbox.state.kubeconfig}",
        f'export PATH={sandbox.kubectl_bin.parent}:"$PATH"',
    ]
    gone = tessera("sandbox", "kubectl", f"--data-dir={data_dir}-none", "get", "pods", env=env)
    assert gone.returncode == 2 and gone.stderr.startswith("error: no sandbox in ")


def test_doctor_finds_the_sandbox_healthy(
    sandbox: SandboxEnv, sandbox_env: tuple[Path, dict[str, str]]
) -> None:
    """Nothing to fix on a healthy sandbox: no memory label is missing (each GPU's memory comes from its
    node's GPUNodeReport) and the webhook probe is refused."""
    _, env = sandbox_env
    proc = tessera("doctor", f"--kubeconfig={sandbox.state.kubeconfig}", "-o", "json", env=env)
    findings = json.loads(proc.stdout)
    assert proc.returncode == 0 and [f for f in findings if f["status"] != "ok"] == [], findings


def test_up_without_what_real_kubelets_need_says_so_in_one_line(tmp_path: Path) -> None:
    """No `unshare` on PATH (as on a machine without util-linux): `up` refuses before starting anything."""
    env = {**os.environ, "PATH": str(tmp_path / "empty")}
    proc = tessera("sandbox", "up", "--nodes=1", f"--data-dir={tmp_path / 'box'}", env=env)
    assert proc.returncode == 1
    assert proc.stderr.strip() in (
        "error: real kubelets need `unshare` (util-linux) on PATH; or use --kubelet standin",
        "error: real kubelets need root (a private mount namespace per kubelet); run as root or use --kubelet standin",
    )
    assert not (tmp_path / "box").exists()
