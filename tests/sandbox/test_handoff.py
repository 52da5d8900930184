"""The device-plugin hand-off of DESIGN.md step 3 on a real kubelet: the plugin finds the pod the kubelet
admits in its own watch of the node's pods (and the kubelet's PodResources list), answers every container
that asks, confirms in PreStartContainer, and marks the pod `tessera.dev/gpu-allocated`; the scheduler keeps
one such pod per node waiting for it, and charges pods it did not place to the GPUs the plugin gave them.

The first four tests are the four ways the hand-off before issue 28 (a node annotation lock) failed against
a real kubelet; each failed then (three every time, the preset-nodeName race about 1 round in 5) and passes
now, every round. Then the cases a real kubelet brings that the stand-in did not: several GPU containers in
one pod, a kubelet restart and a device-plugin restart with pods running or half-started, a pod deleted
around its Allocate.

Their own sandbox (one node, 4 A100-40GB, real kubelet): a failure here can leave a GPU that keeps failing
the pods placed on it, which must not reach the session sandbox's tests. What each test reads:
- the pod's phase and reason (a refused Allocate is `Failed`, `UnexpectedAdmissionError`);
- fakecri's record of each container's CreateContainer (`container_record`): the `NVIDIA_VISIBLE_DEVICES`
  the device plugin answered, as the kubelet passed it on;
- the kubelet's checkpoint (`kubelet_devices`): which devices the kubelet gave each container;
- the plugin's mark (`tessera.dev/gpu-allocated`): what it recorded the pod got.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.api.allocation import GPUAllocation
from scheduler.api.keys import GPU_ALLOCATED
from tests.sandbox.env import SandboxEnv, pod, wait_for

pytestmark = pytest.mark.apiserver

NODE = "gpu-node-1"
GPUS = 4
WHOLE = "nvidia.com/gpu"
# An init container that completes at once (fakecri: scripts/control_plane/fakecri/main.go).
EXITS_AT_ONCE = [{"name": "TESSERA_FAKE_EXIT_AFTER", "value": "0s"}]


@pytest.fixture(scope="module")
def sandbox(new_sandbox: Callable[[int, str], SandboxEnv]) -> SandboxEnv:
    return new_sandbox(1, f"{GPUS}xA100-40GB")


def _gpu_limit(count: int = 1) -> dict[str, Any]:
    return {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {WHOLE: str(count)}}


def _visible(sandbox: SandboxEnv, ns: str, pod_name: str, container: str) -> str:
    return str(sandbox.container_record(ns, pod_name, container)["envs"].get("NVIDIA_VISIBLE_DEVICES", ""))


def _settled(
    sandbox: SandboxEnv, ns: str, names: list[str], timeout_s: float = 45
) -> dict[str, dict[str, Any]]:
    """Wait until every pod is Running, Succeeded or Failed; fail at once naming a Failed one."""

    def phases() -> dict[str, dict[str, Any]] | None:
        pods = {n: sandbox.pod(ns, n) for n in names}
        for name, obj in pods.items():
            status = obj.get("status") or {}
            if status.get("phase") == "Failed":
                raise AssertionError(f"pod {name} Failed: {status.get('reason')}: {status.get('message')}")
        done = all((p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in pods.values())
        return pods if done else None

    try:
        return wait_for(f"pods {names} running", phases, timeout_s)
    except AssertionError as exc:
        seen = {n: _summary(sandbox.pod(ns, n)) for n in names}
        raise AssertionError(f"{exc}; {seen}") from None


def _allocation(sandbox: SandboxEnv, ns: str, name: str) -> GPUAllocation | None:
    raw = (sandbox.pod(ns, name)["metadata"].get("annotations") or {}).get(GPU_ALLOCATED)
    return None if raw is None else GPUAllocation.from_annotation(raw)


def _summary(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    conditions = [f"{c['type']}={c['status']} {c.get('message', '')}" for c in status.get("conditions") or []]
    states = [next(iter(c.get("state") or {"?": 0})) for c in status.get("containerStatuses") or []]
    return (
        f"node {obj['spec'].get('nodeName')}, phase {status.get('phase')}, {conditions}, containers {states}"
    )


def test_init_and_app_container_each_with_a_gpu_share_the_pods_gpu(sandbox: SandboxEnv) -> None:
    with sandbox.namespace() as ns:
        body = pod("staged", gpus=1)
        body["spec"]["initContainers"] = [
            {"name": "setup", "image": "busybox", "env": EXITS_AT_ONCE, "resources": _gpu_limit()}
        ]
        sandbox.apply(ns, body)
        staged = _settled(sandbox, ns, ["staged"])["staged"]
        (gpu,) = sandbox.assignment(staged).gpus
        # The app container reuses the init container's device (the kubelet's rule), with the same answer.
        assert sandbox.kubelet_devices(ns, "staged") == {
            "setup": {WHOLE: [gpu.uuid]},
            "main": {WHOLE: [gpu.uuid]},
        }
        assert _visible(sandbox, ns, "staged", "setup") == _visible(sandbox, ns, "staged", "main") == gpu.uuid


def test_a_pod_of_another_scheduler_asking_for_a_whole_gpu_gets_a_free_one(sandbox: SandboxEnv) -> None:
    """As NVIDIA's plugin would, a GPU neither held nor assigned; the plugin records which, and the
    scheduler charges the pod there: the next Tessera pods get the other GPUs, never that one."""
    with sandbox.namespace() as ns:
        sandbox.apply(ns, pod("tessera-one", gpus=1))
        ours = sandbox.assignment(_settled(sandbox, ns, ["tessera-one"])["tessera-one"]).gpus[0].uuid
        body = pod("theirs", gpus=1)
        del body["spec"]["schedulerName"]  # kube-scheduler places it
        sandbox.apply(ns, body)
        _settled(sandbox, ns, ["theirs"])
        (device,) = sandbox.kubelet_devices(ns, "theirs")["main"][WHOLE]
        assert _visible(sandbox, ns, "theirs", "main") == device
        assert device != ours and device in sandbox.reported_uuids(NODE)
        mark = wait_for("theirs marked", lambda: _allocation(sandbox, ns, "theirs"), 15)
        assert [g.uuid for g in mark.gpus] == [device]
        sandbox.apply(ns, pod("two", gpus=2))
        two = _settled(sandbox, ns, ["two"])["two"]
        assert {g.uuid for g in sandbox.assignment(two).gpus} == set(sandbox.reported_uuids(NODE)) - {
            ours,
            device,
        }


def test_a_preset_node_name_pod_deleted_during_allocate_takes_nobodys_gpu(sandbox: SandboxEnv) -> None:
    """Rounds of: a pod with `spec.nodeName` preset and the default scheduler asks for a GPU (the kubelet
    admits it at once); a Tessera pod is bound to the node; the first pod is deleted gracefully. The Tessera
    pod must run on its own GPU every round. Before issue 28 the first pod's Allocate waited for the node's
    bind lock and took the Tessera pod's answer when the deletion landed inside that wait (about 1 round
    in 5). Now it gets a free GPU at once, and the scheduler charges it there until it is gone."""
    with sandbox.namespace() as ns:
        for round_ in range(6):
            preset, placed = f"preset-{round_}", f"placed-{round_}"
            body = pod(preset, gpus=1, grace_s=5)
            del body["spec"]["schedulerName"]
            body["spec"]["nodeName"] = NODE
            sandbox.apply(ns, body)
            time.sleep(0.3)  # the kubelet admits it: its Allocate now waits
            sandbox.apply(ns, pod(placed, gpus=1))
            wait_for(f"{placed} bound", lambda p=placed: sandbox.pod(ns, p)["spec"].get("nodeName"), 10, 0.05)
            sandbox.kubectl("delete", "pod", preset, "-n", ns, "--wait=false")
            obj = _settled(sandbox, ns, [placed], timeout_s=30)[placed]
            (gpu,) = sandbox.assignment(obj).gpus
            assert _visible(sandbox, ns, placed, "main") == gpu.uuid, f"round {round_}"
            sandbox.kubectl("delete", "pod", "--all", "-n", ns, "--grace-period=0", "--force")
            wait_for("the round's pods gone", lambda: not sandbox.core.list_namespaced_pod(ns).items, 30)


def test_a_sidecar_and_its_main_container_each_get_their_own_gpu(sandbox: SandboxEnv) -> None:
    """The pod is charged 2 GPUs (the kubelet counts a sidecar beside the app containers); each container
    gets one of them, and the next pod neither. (Before issue 28 it left a GPU that failed the pods placed
    on it.)"""
    with sandbox.namespace() as ns:
        body = pod("with-sidecar", gpus=1)
        body["spec"]["initContainers"] = [
            {"name": "sidecar", "image": "busybox", "restartPolicy": "Always", "resources": _gpu_limit()}
        ]
        sandbox.apply(ns, body, pod("next", gpus=1))
        pods = _settled(sandbox, ns, ["with-sidecar", "next"])
        mine = {g.uuid for g in sandbox.assignment(pods["with-sidecar"]).gpus}
        (theirs,) = [g.uuid for g in sandbox.assignment(pods["next"]).gpus]
        sidecar, main = (
            _visible(sandbox, ns, "with-sidecar", "sidecar"),
            _visible(sandbox, ns, "with-sidecar", "main"),
        )
        assert sidecar != main and {sidecar, main} == mine  # charged 2 GPUs, one to each container
        assert _visible(sandbox, ns, "next", "main") == theirs and theirs not in mine


def test_several_gpu_containers_in_one_pod_each_get_their_own_gpus(sandbox: SandboxEnv) -> None:
    """Two app containers asking for 1 and 2 GPUs: the pod is charged 3, each container gets its own of
    them (the kubelet calls Allocate per container, the plugin steers each to the pod's assigned GPUs)."""
    with sandbox.namespace() as ns:
        body = pod("multi", gpus=1)
        body["spec"]["containers"].append({"name": "helper", "image": "busybox", "resources": _gpu_limit(2)})
        sandbox.apply(ns, body)
        multi = _settled(sandbox, ns, ["multi"])["multi"]
        assigned = {g.uuid for g in sandbox.assignment(multi).gpus}
        assert len(assigned) == 3
        main = _visible(sandbox, ns, "multi", "main").split(",")
        helper = _visible(sandbox, ns, "multi", "helper").split(",")
        assert len(main) == 1 and len(helper) == 2 and set(main) | set(helper) == assigned
        held = sandbox.kubelet_devices(ns, "multi")
        assert held == {"main": {WHOLE: sorted(main)}, "helper": {WHOLE: sorted(helper)}}
        mark = wait_for("multi marked", lambda: _allocation(sandbox, ns, "multi"), 15)
        assert {g.uuid for g in mark.gpus} == assigned


def test_a_device_plugin_restart_between_allocate_and_prestart(sandbox: SandboxEnv) -> None:
    """The plugin answered the pod's Allocate (both containers, at admission) and restarts while its init
    container runs: the new process, which answered nothing, confirms the app container in
    PreStartContainer from the kubelet's list and the pod's assignment, and the app container starts on the
    same GPU."""
    with sandbox.namespace() as ns:
        body = pod("slow", gpus=1)
        body["spec"]["initContainers"] = [{"name": "setup", "image": "busybox", "resources": _gpu_limit(),
                                           "env": [{"name": "TESSERA_FAKE_EXIT_AFTER", "value": "12s"}]}]  # fmt: skip
        sandbox.apply(ns, body)
        wait_for("the init container runs", lambda: sandbox.created_containers(ns, "slow", "setup"), 30)
        registered = sandbox.plugin_registrations(NODE)
        sandbox.restart(f"device-plugin/{NODE}")
        sandbox.wait_plugin_registered(NODE, registered)
        slow = _settled(sandbox, ns, ["slow"], timeout_s=60)["slow"]
        (gpu,) = sandbox.assignment(slow).gpus
        assert _visible(sandbox, ns, "slow", "setup") == _visible(sandbox, ns, "slow", "main") == gpu.uuid
        assert [r["container"] for r in sandbox.created_containers(ns, "slow")] == ["setup", "main"]
        sandbox.node_ready(NODE, GPUS)


def test_a_kubelet_restart_with_pods_running_serves_the_next_pod_right(sandbox: SandboxEnv) -> None:
    """The restarted kubelet takes its running pods back from its checkpoint (no Allocate for them); the
    plugin does not take any of them for the pod it admits next, which gets its own assigned GPU."""
    with sandbox.namespace() as ns:
        sandbox.apply(ns, pod("held", gpus=1), pod("part", annotations={"gpu-fraction": "0.5"}))
        before = {name: sandbox.kubelet_devices(ns, name) for name in _settled(sandbox, ns, ["held", "part"])}
        registered = sandbox.plugin_registrations(NODE)
        sandbox.restart(f"kubelet/{NODE}")
        sandbox.wait_plugin_registered(NODE, registered)
        sandbox.node_ready(NODE, GPUS)
        sandbox.apply(ns, pod("next", annotations={"gpu-fraction": "0.5"}), pod("whole", gpus=1))
        pods = _settled(sandbox, ns, ["held", "part", "next", "whole"], timeout_s=60)
        assert {name: sandbox.kubelet_devices(ns, name) for name in ("held", "part")} == before
        for name in ("next", "whole"):
            (gpu,) = sandbox.assignment(pods[name]).gpus
            assert _visible(sandbox, ns, name, "main") == gpu.uuid, name
            assert (
                wait_for(f"{name} marked", lambda n=name: _allocation(sandbox, ns, n), 15).gpus[0].uuid
                == gpu.uuid
            )


def test_a_pod_deleted_around_its_allocate_leaves_nothing_behind(sandbox: SandboxEnv) -> None:
    """Rounds of: a fraction deleted the moment it is bound (its Allocate may be under way, done, or not
    started); the next fraction is then placed on the node (the deleted pod waits for nothing any more)
    and runs on its own GPU with its own answer."""
    with sandbox.namespace() as ns:
        for round_ in range(3):
            gone, kept = f"gone-{round_}", f"kept-{round_}"
            sandbox.apply(ns, pod(gone, annotations={"gpu-fraction": "0.5"}))
            wait_for(f"{gone} bound", lambda g=gone: sandbox.pod(ns, g)["spec"].get("nodeName"), 15, 0.02)
            sandbox.kubectl("delete", "pod", gone, "-n", ns, "--wait=false")
            sandbox.apply(ns, pod(kept, annotations={"gpu-fraction": "0.5"}))
            obj = _settled(sandbox, ns, [kept], timeout_s=45)[kept]
            (gpu,) = sandbox.assignment(obj).gpus
            assert _visible(sandbox, ns, kept, "main") == gpu.uuid, f"round {round_}"
            assert (
                wait_for(f"{kept} marked", lambda k=kept: _allocation(sandbox, ns, k), 15).gpus[0].uuid
                == gpu.uuid
            )
            sandbox.kubectl("delete", "pod", "--all", "-n", ns, "--grace-period=0", "--force")
            wait_for("the round's pods gone", lambda: not sandbox.core.list_namespaced_pod(ns).items, 30)
