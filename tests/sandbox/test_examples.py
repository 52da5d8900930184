"""Every file in examples/ on the real API server of `tessera sandbox`, with kubelet stand-ins: the install
examples are sized for real GPU nodes (a gang worker asks 4 CPUs and 16Gi), which a real kubelet on this
machine (the host's 2 CPUs) cannot offer, and the stand-in's nodes can (32 CPUs, 256Gi).

- examples/install/ is what docs/install.md has users apply, in its order: applied with kubectl as they
  are, and each workload must run (the half-GPU pod at once; the gang of 4 whole GPUs, all of the
  sandbox's, once the half-GPU pod is gone, never partly before).
- examples/scenarios/ and examples/simulate/ are simulated-only: each brings its own Nodes and a timeline
  in simulated time (`tessera.dev/sim-arrival`), which a real cluster has not. The real API server must
  still accept every object in them (CRD schemas and CEL rules, the admission webhooks):
  `kubectl apply --dry-run=server`.
- examples/kai/ is applied for real on the KAI sandbox (test_kai_sandbox.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from tests.sandbox.env import SandboxEnv, wait_for

pytestmark = pytest.mark.apiserver

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
INSTALL = ["queues.yaml", "fractional-pod.yaml", "gang-job.yaml"]  # in docs/install.md's order


@pytest.fixture(scope="module")
def sandbox(standin_sandbox: SandboxEnv) -> SandboxEnv:
    return standin_sandbox


def _gang(sandbox: SandboxEnv) -> list[dict]:
    out = sandbox.kubectl("get", "pods", "-n", "default", "-l", "job-name=resnet-ddp", "-o", "json").stdout
    return list(json.loads(out)["items"])


def test_install_examples_run_on_the_sandbox(sandbox: SandboxEnv) -> None:
    assert sorted(p.name for p in (EXAMPLES / "install").glob("*.yaml")) == sorted(INSTALL)
    files = [str(EXAMPLES / "install" / name) for name in INSTALL]
    try:
        sandbox.kubectl("apply", "-f", files[0])
        sandbox.kubectl("apply", "-f", files[1])
        half = sandbox.running("default", "half-gpu", timeout_s=60)
        (gpu,) = sandbox.assignment(half).gpus
        assert gpu.milli == 500
        (alloc,) = sandbox.container_record("default", "half-gpu", "cuda")["allocations"]
        assert alloc["envs"]["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid

        # The gang of 4 whole GPUs does not fit next to the half GPU (3 GPUs left): no worker is bound.
        sandbox.kubectl("apply", "-f", files[2])
        wait_for("4 workers created", lambda: len(_gang(sandbox)) == 4)
        time.sleep(3)  # three scheduling cycles
        assert [p["spec"].get("nodeName") for p in _gang(sandbox)] == [None] * 4
        # Once the half-GPU pod is gone, the gang runs whole, 2 workers on each node.
        sandbox.kubectl("delete", "pod", "half-gpu", "-n", "default", "--grace-period=1", "--timeout=60s")

        def gang_running() -> list[dict] | None:
            pods = _gang(sandbox)
            return (
                pods if len(pods) == 4 and all(p["status"].get("phase") == "Running" for p in pods) else None
            )

        pods = wait_for("the 4-worker gang running", gang_running, 60)
        assert len({p["spec"]["nodeName"] for p in pods}) == 2
        phase = sandbox.kubectl(
            "get", "podgroup", "resnet-ddp", "-n", "default", "-o", "jsonpath={.status.phase}"
        )
        assert phase.stdout == "Running"
    finally:
        for path in reversed(files):
            sandbox.kubectl(
                "delete", "-f", path, "--grace-period=0", "--force", "--ignore-not-found", check=False
            )
        wait_for("example pods gone", lambda: not sandbox.core.list_namespaced_pod("default").items, 60)


def test_simulated_examples_are_accepted_by_the_real_api_server(sandbox: SandboxEnv) -> None:
    files = sorted(p for p in EXAMPLES.rglob("*.yaml") if p.parent.name not in ("install", "kai"))
    assert {p.parent.name for p in files} == {"scenarios", "simulate"}
    assert not [
        p for p in EXAMPLES.rglob("*.yaml") if p.parent.name == "kai" and "kind: Node" in p.read_text()
    ]
    docs = {path: [d for d in yaml.safe_load_all(path.read_text()) if d] for path in files}
    everything = [d for file_docs in docs.values() for d in file_docs]
    namespaces = sorted(
        {str(d["metadata"]["namespace"]) for d in everything if d["metadata"].get("namespace")}
    )
    made = [ns for ns in namespaces if sandbox.kubectl("get", "namespace", ns, check=False).returncode != 0]
    queues: list[dict] = []
    refused = []
    try:
        for ns in made:
            sandbox.kubectl("create", "namespace", ns)
        for path, file_docs in docs.items():
            # A dry run persists nothing, but the webhook checks that a pod's queue exists: the file's
            # Queues are created for real (removed at the end), then the whole file is a server dry run.
            file_queues = [d for d in file_docs if d["kind"] == "Queue"]
            if file_queues:
                sandbox.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(file_queues))
                queues += file_queues
            proc = sandbox.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
            if proc.returncode != 0 or proc.stdout.count("(server dry run)") != len(file_docs):
                refused.append(f"{path.relative_to(EXAMPLES)}: {proc.stderr.strip() or proc.stdout}")
    finally:
        if queues:
            sandbox.kubectl(
                "delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(queues), check=False
            )
        for ns in made:
            sandbox.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert not refused, "\n".join(refused)
