"""`tessera sandbox up --kubelet standin`, as a user runs it: the stand-in is kept for many-node runs and made-up
node sizes (a real kubelet reports the host's CPUs and memory), and `tessera sandbox restart` restarts one of
its processes. The stand-in's device manager has its own tests (test_kubelet_devices.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scheduler.sandbox.processes import ProcessTable
from tests.sandbox.conftest import tessera
from tests.sandbox.env import SandboxEnv, pod, wait_for

pytestmark = pytest.mark.apiserver


def test_standin_nodes_offer_made_up_sizes_and_restart_from_the_cli(standin_sandbox: SandboxEnv) -> None:
    sandbox = standin_sandbox
    node = json.loads(sandbox.kubectl("get", "node", "gpu-node-1", "-o", "json").stdout)
    assert node["status"]["capacity"]["cpu"] == "32" and node["status"]["capacity"]["memory"] == "256Gi"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == "none://0"

    env = {**os.environ, "KUBEBUILDER_ASSETS": str(sandbox.kubectl_bin.parent)}
    data_dir = sandbox.state.data_dir
    before = ProcessTable(Path(data_dir)).get("kubelet/gpu-node-1")
    registered = sandbox.plugin_registrations("gpu-node-1")
    proc = tessera("sandbox", "restart", "kubelet/gpu-node-1", f"--data-dir={data_dir}", env=env)
    assert proc.returncode == 0, proc.stderr
    after = ProcessTable(Path(data_dir)).get("kubelet/gpu-node-1")
    assert before is not None and after is not None and after.pid != before.pid
    assert proc.stdout.strip() == f"restarted kubelet/gpu-node-1 (pid {after.pid}); log {after.log}"
    unknown = tessera("sandbox", "restart", "kubelet/nope", f"--data-dir={data_dir}", env=env)
    assert unknown.returncode == 1 and unknown.stderr.startswith(
        "error: no process kubelet/nope in this sandbox"
    )

    # The restarted stand-in offers the GPUs again once the device plugin has registered with it (a pod
    # placed before that is refused OutOfnvidia.com/gpu, as by a real kubelet).
    sandbox.wait_plugin_registered("gpu-node-1", registered)
    sandbox.node_ready("gpu-node-1", 2)
    with sandbox.namespace() as ns:
        body = pod("short", gpus=1, annotations={"tessera.dev/sim-duration": "2s"})
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-node-1"}
        sandbox.apply(ns, body)
        wait_for("the pod ran and Succeeded", lambda: sandbox.phase(ns, "short") == "Succeeded", 60)
