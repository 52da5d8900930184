"""The KAI path with the documented tools (docs/kai-compat.md): `tessera sandbox up --kai-compat`, then
`tessera sandbox kubectl apply -f examples/kai/` (KAI's quickstart, GPU-sharing and batch examples, a
department's KAI queues and a gang as a KAI PodGroup), all scheduled by Tessera in KAI's place on the real
API server. Its own sandbox: pods name `kai-scheduler` there."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.sandbox.processes import ProcessTable, alive
from scheduler.sandbox.sandbox import Sandbox
from tests.controlplane.fixtures import _assets
from tests.sandbox.conftest import data_folder, tessera
from tests.sandbox.env import SandboxEnv, wait_for

pytestmark = pytest.mark.apiserver

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kai"
KAI = ("scheduling.run.ai", "v2")
# Every pod the examples make: (namespace, name prefix) -> how many.
EXPECTED = {("default", "cpu-only-pod"): 1, ("default", "gpu-pod"): 1, ("default", "gpu-sharing"): 1,
            ("default", "batch-job-"): 2, ("team-a", "ddp-"): 3}  # fmt: skip


@pytest.fixture(scope="module")
def kai_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SandboxEnv, dict[str, str], str]]:
    data_dir = data_folder(tmp_path_factory, "kai")
    env = {**os.environ, "KUBEBUILDER_ASSETS": str(_assets())}
    # Stand-in kubelets: team-training's workers ask 4 CPUs and 16Gi each, more than a real kubelet on this
    # machine offers (the host's CPUs).
    up = tessera("sandbox", "up", "--kai-compat", "--kubelet=standin", "--gpus=4xA100-40GB",
                 f"--data-dir={data_dir}", env=env)  # fmt: skip
    table = ProcessTable(data_dir)
    try:
        assert up.returncode == 0, f"tessera sandbox up --kai-compat failed ({up.returncode}):\n{up.stderr}"
        state = Sandbox(data_dir).state()
        assert state is not None
        yield SandboxEnv(state, Path(state.kubectl)), env, up.stderr
    finally:
        records = table.records()
        down = tessera("sandbox", "down", f"--data-dir={data_dir}", env=env)
        assert down.returncode == 0, down.stderr
        assert not [r.name for r in records if alive(r)]


def _pods(sandbox: SandboxEnv) -> list[dict[str, Any]]:
    return list(json.loads(sandbox.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"])


def _all_running(sandbox: SandboxEnv) -> list[dict[str, Any]] | None:
    pods = _pods(sandbox)
    counts = {
        key: sum(
            1
            for p in pods
            if p["metadata"]["namespace"] == key[0]
            and p["metadata"]["name"].startswith(key[1])
            and p["status"].get("phase") == "Running"
        )
        for key in EXPECTED
    }
    return pods if counts == EXPECTED else None


def test_kai_examples_schedule_unchanged_on_the_kai_sandbox(
    kai_sandbox: tuple[SandboxEnv, dict[str, str], str],
) -> None:
    sandbox, env, up_output = kai_sandbox
    state = sandbox.state
    assert state.kai_compat and state.scheduler_name == "kai-scheduler"
    # `up` says which kubectl goes with this control plane and how to use it.
    assert f"kubectl {state.kubernetes_version}: {state.kubectl}" in up_output
    assert "tessera sandbox kubectl" in up_output and "kai-scheduler" in up_output
    # KAI's side as KAI's install leaves it: its CRDs, and its two default queues.
    queues = sandbox.custom.list_cluster_custom_object(*KAI, "queues")["items"]
    assert {q["metadata"]["name"] for q in queues} == {"default-parent-queue", "default-queue"}

    # The documented command, as a user types it.
    applied = tessera(
        "sandbox", "kubectl", f"--data-dir={state.data_dir}", "apply", "-f", str(EXAMPLES), env=env
    )
    assert applied.returncode == 0, applied.stderr
    assert "Warning" not in applied.stderr  # KAI's default queues merge quietly (applied as a user would)
    pods = wait_for("every pod of examples/kai Running", lambda: _all_running(sandbox), 90)

    by_name = {p["metadata"]["name"]: p for p in pods}
    assert sandbox.assignment(by_name["gpu-sharing"]).gpus[0].milli == 500  # KAI's gpu-fraction: "0.5"
    assert [g.milli for g in sandbox.assignment(by_name["gpu-pod"]).gpus] == [1000]
    assert "tessera.dev/gpu-assignment" not in (by_name["cpu-only-pod"]["metadata"].get("annotations") or {})
    ddp = [p for p in pods if p["metadata"]["name"].startswith("ddp-")]
    assert {p["metadata"]["annotations"]["pod-group-name"] for p in ddp} == {"ddp"}

    # Status in KAI's shape on KAI's objects: what each queue holds (3.5 GPUs in default-queue, 3 in team-a).
    def allocated(name: str) -> str | None:
        q = sandbox.custom.get_cluster_custom_object(*KAI, "queues", name)
        return (q.get("status") or {}).get("allocated", {}).get("nvidia.com/gpu")

    wait_for(
        "KAI queue status written",
        lambda: allocated("default-queue") == "3500m" and allocated("team-a") == "3",
    )
    listed = tessera("queues", f"--kubeconfig={state.kubeconfig}", "-o", "json", env=env)
    rows = {q["name"]: q for q in json.loads(listed.stdout)["queues"]}
    assert rows["team-a"]["gpu"]["allocated"] == 3 and rows["default-queue"]["gpu"]["allocated"] == 3.5

    # Nothing for the doctor to fix: the webhook probe names kai-scheduler, as the webhooks match.
    doctor = tessera("doctor", f"--kubeconfig={state.kubeconfig}", "-o", "json", env=env)
    findings = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and [f for f in findings if f["status"] != "ok"] == [], findings
