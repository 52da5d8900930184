"""`tessera-device-plugin --fake-gpus` as a process: standalone serving, and a clean SIGTERM shutdown."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from device_plugin.v1beta1 import api_pb2
from tests.device_plugin.fake_kubelet import FakeKubelet

REPO = Path(__file__).resolve().parents[2]


def test_standalone_fake_gpus_serves_and_stops_cleanly_on_sigterm(kubelet: FakeKubelet) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "device_plugin",
            "--fake-gpus",
            "2xA100-80GB",
            "--plugin-dir",
            str(kubelet.plugin_dir),
            "--node-name",
            "demo",
            "--slices-per-gpu",
            "10",
            "--watch-interval",
            "0.05",
            "--pod-resources-socket",
            "",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        requests = kubelet.wait_for_registrations(2, timeout_s=30)
        assert {r.resource_name for r in requests} == {"tessera.dev/gpu-slice", "nvidia.com/gpu"}
        stub = kubelet.plugin("tessera-gpu-slice.sock")
        devices = next(stub.ListAndWatch(api_pb2.Empty(), timeout=5)).devices
        assert len(devices) == 20 and {d.health for d in devices} == {"Healthy"}
        with pytest.raises(grpc.RpcError) as err:
            stub.Allocate(
                api_pb2.AllocateRequest(
                    container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[devices[0].ID])]
                ),
                timeout=5,
            )
        assert "no Kubernetes API configured (standalone mode)" in err.value.details()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "received SIGTERM" in out
    left = sorted(p.name for p in kubelet.plugin_dir.iterdir())
    assert left == ["kubelet.sock"], left


def test_bad_fake_gpu_spec_is_a_one_line_error(plugin_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "device_plugin", "--fake-gpus", "2xNOPE", "--plugin-dir", str(plugin_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "NOPE" in proc.stderr
    assert "Traceback" not in proc.stderr
