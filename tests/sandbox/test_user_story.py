"""The user's story end to end, typed with the real kubectl against `tessera sandbox`: the chart's CRDs and
webhooks on a real kube-apiserver, the scheduler, and per node a real kubelet (v1.34.4, on fakecri) whose
device manager calls the real device plugin's Allocate over its gRPC socket, with GPU UUIDs from the real
agent's GPUNodeReport. What each container was given is fakecri's record of its CreateContainer; which
devices the kubelet gave it, the kubelet's own checkpoint.

The sandbox has 2 nodes x 2 A100-40GB; each test works in its own namespace and leaves every GPU free.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from scheduler.sandbox import manifests
from scheduler.sandbox.processes import ProcessTable
from tests.sandbox.env import SandboxEnv, pod, wait_for

pytestmark = pytest.mark.apiserver

SLICE = "tessera.dev/gpu-slice"
WHOLE = "nvidia.com/gpu"


def test_crds_are_established_and_kubectl_shows_their_printer_columns(sandbox: SandboxEnv) -> None:
    crds = manifests.crds()
    for crd in crds:
        name = crd["metadata"]["name"]
        established = sandbox.kubectl(
            "get", "crd", name, "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}"
        ).stdout
        assert established == "True", name
    with sandbox.namespace() as ns:
        group = {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": "pg"}, "spec": {"minMember": 2}}  # fmt: skip
        sandbox.apply(ns, group)
        topology = {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "Topology",
                    "metadata": {"name": "dc"}, "spec": {"levels": [{"nodeLabel": "example.com/rack",
                                                                     "alias": "rack"}]}}  # fmt: skip
        sandbox.kubectl("apply", "-f", "-", input=yaml.safe_dump(topology))
        try:
            table = sandbox.kubectl(
                "get", "queues,podgroups,gpunodereports,topologies", "-A", "-o", "wide"
            ).stdout
        finally:
            sandbox.kubectl("delete", "topology", "dc", check=False)
    header_lines = [line for line in table.splitlines() if line.startswith(("NAME", "NAMESPACE"))]
    assert len(header_lines) == 4, table
    for crd in crds:
        (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
        for column in version.get("additionalPrinterColumns") or []:
            assert any(column["name"].upper() in h for h in header_lines), (column["name"], table)
    rows = table.splitlines()
    assert _after(rows, "queue.scheduling.tessera.dev/default"), table
    for node in ("gpu-node-1", "gpu-node-2"):
        after = _after(rows, f"gpunodereport.scheduling.tessera.dev/{node}")
        assert after[:3] == ["2", "2", "Healthy"], table  # GPUS HEALTHY HEALTH, from the agent's NVML view
    assert _after(rows, "podgroup.scheduling.tessera.dev/pg")[:1] == ["2"], table  # MINMEMBER


def _after(rows: list[str], name: str) -> list[str]:
    """The cells after `name` in the one row that has it."""
    (cells,) = [r.split() for r in rows if name in r.split()]
    return cells[cells.index(name) + 1 :]


def test_fractions_share_a_gpu_named_by_the_report_and_deleting_them_frees_it(sandbox: SandboxEnv) -> None:
    with sandbox.namespace() as ns:
        sandbox.apply(ns, pod("half", annotations={"gpu-fraction": "0.5"}))
        half = sandbox.running(ns, "half")
        assignment = sandbox.assignment(half)
        (gpu,) = assignment.gpus
        node = assignment.node
        assert half["spec"]["nodeName"] == node and gpu.milli == 500
        assert gpu.uuid in sandbox.reported_uuids(node)  # the identity the agent published
        # The webhook gave the container the slice limit, so the kubelet asked the device plugin.
        assert half["spec"]["containers"][0]["resources"]["limits"][SLICE] == "1"
        (slices,) = sandbox.kubelet_devices(ns, "half")["main"][SLICE]
        assert slices.split("::")[0] == gpu.uuid  # the kubelet picked one of that GPU's slices
        envs = sandbox.container_record(ns, "half")["envs"]
        assert envs["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid
        assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"

        sandbox.apply(ns, pod("quarter", annotations={"gpu-fraction": "0.25"}))
        quarter = sandbox.running(ns, "quarter")
        (shared,) = sandbox.assignment(quarter).gpus
        assert quarter["spec"]["nodeName"] == node and (shared.uuid, shared.milli) == (gpu.uuid, 250)
        envs = sandbox.container_record(ns, "quarter")["envs"]
        assert envs["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid
        assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"

        # The agent's report, the queue's status and the scheduler's metrics all count 0.75 of the GPU...
        key = (node, str(gpu.index))
        wait_for("report assigns 750", lambda: sandbox.assigned_milli(node)[gpu.uuid] == 750, 45)
        wait_for(
            "queue allocates 0.75",
            lambda: sandbox.queue_status("default").get("allocated", {}).get("gpu") == 0.75,
        )
        wait_for("metrics say 0.75", lambda: sandbox.gpu_allocated_fraction().get(key) == 0.75)
        # ... and none of it once both pods are gone (deleted gracefully: the kubelet removes them).
        sandbox.kubectl("delete", "pod", "half", "quarter", "-n", ns, "--timeout=60s")
        wait_for("report frees the GPU", lambda: sandbox.assigned_milli(node)[gpu.uuid] == 0, 45)
        wait_for(
            "queue frees it", lambda: sandbox.queue_status("default").get("allocated", {}).get("gpu", 0) == 0
        )
        wait_for("metrics free it", lambda: sandbox.gpu_allocated_fraction().get(key) == 0.0)


def test_gpu_memory_and_whole_gpu_pods_get_their_gpus_from_allocate(sandbox: SandboxEnv) -> None:
    with sandbox.namespace() as ns:
        sandbox.apply(ns, pod("mem", annotations={"gpu-memory": "8192"}), pod("whole", gpus=1))
        mem, whole = sandbox.running(ns, "mem"), sandbox.running(ns, "whole")
        (m,) = sandbox.assignment(mem).gpus
        (w,) = sandbox.assignment(whole).gpus
        assert m.memory_mib == 8192 and m.milli == 200  # 8 GiB of a 40 GiB GPU
        assert w.milli == 1000 and w.uuid != m.uuid
        assert {m.uuid, w.uuid} <= {
            u for n in ("gpu-node-1", "gpu-node-2") for u in sandbox.reported_uuids(n)
        }
        assert list(sandbox.kubelet_devices(ns, "mem")["main"]) == [SLICE]
        assert sandbox.container_record(ns, "mem")["envs"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
        assert sandbox.kubelet_devices(ns, "whole") == {"main": {WHOLE: [w.uuid]}}
        assert sandbox.container_record(ns, "whole")["envs"]["NVIDIA_VISIBLE_DEVICES"] == w.uuid


def _job(name: str, group: str, size: int, *, duration: str | None = None) -> dict:
    annotations = {"tessera.dev/pod-group": group}
    if duration:
        annotations["tessera.dev/sim-duration"] = duration
    template = pod("worker", gpus=1, annotations=annotations)
    for key in ("apiVersion", "kind"):
        del template[key]
    del template["metadata"]["name"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"parallelism": size, "completions": size, "backoffLimit": 0, "template": template},
    }


def _group(name: str, size: int) -> dict:
    return {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name}, "spec": {"minMember": size}}  # fmt: skip


def _job_pods(sandbox: SandboxEnv, ns: str, job: str) -> list[dict]:
    out = sandbox.kubectl("get", "pods", "-n", ns, "-l", f"job-name={job}", "-o", "json").stdout
    return list(json.loads(out)["items"])


def _all_running(sandbox: SandboxEnv, ns: str, job: str, size: int) -> list[dict] | None:
    pods = _job_pods(sandbox, ns, job)
    ok = len(pods) == size and all(p["status"].get("phase") == "Running" for p in pods)
    return pods if ok else None


def test_a_gang_from_a_real_job_is_placed_whole_or_not_at_all(sandbox: SandboxEnv) -> None:
    with sandbox.namespace() as ns:
        sandbox.apply(ns, _group("trainers", 3), _job("trainers", "trainers", 3))
        running = wait_for("3 trainers running", lambda: _all_running(sandbox, ns, "trainers", 3), 60)
        uuids = [sandbox.assignment(p).gpus[0].uuid for p in running]
        assert len(running) == 3 and len(set(uuids)) == 3
        # 1 GPU is left: a gang of 2 must not take it.
        sandbox.apply(ns, _group("late", 2), _job("late", "late", 2, duration="2s"))
        wait_for("2 late pods created", lambda: len(_job_pods(sandbox, ns, "late")) == 2)
        time.sleep(3)  # three scheduling cycles
        late = _job_pods(sandbox, ns, "late")
        assert [p["spec"].get("nodeName") for p in late] == [None, None]
        described = sandbox.kubectl("describe", "pod", "-n", ns, late[0]["metadata"]["name"]).stdout
        assert f"gang {ns}/late needs 2 more pods placed together" in described, described
        # The first gang finishes: the second runs whole, and its pods complete after their sim-duration.
        sandbox.kubectl("delete", "job", "trainers", "-n", ns, "--cascade=foreground", "--timeout=60s")
        wait_for("late job complete", lambda: sandbox.kubectl(
            "get", "job", "late", "-n", ns, "-o", "jsonpath={.status.succeeded}").stdout == "2", 60)  # fmt: skip


def test_an_invalid_annotation_is_refused_by_the_api_server_with_one_line(sandbox: SandboxEnv) -> None:
    with sandbox.namespace() as ns:
        proc = sandbox.kubectl("apply", "-n", ns, "-f", "-", check=False,
                               input=yaml.safe_dump(pod("bad", annotations={"gpu-fraction": "1.5"})))  # fmt: skip
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert 'admission webhook "pods.mutate.tessera.dev" denied the request' in lines[0]
        assert 'gpu-fraction="1.5"' in lines[0]
        assert sandbox.kubectl("get", "pod", "bad", "-n", ns, check=False).returncode != 0


def test_kubectl_describe_shows_why_a_pod_is_pending(sandbox: SandboxEnv) -> None:
    with sandbox.namespace() as ns:
        sandbox.apply(ns, pod("greedy", gpus=3))  # no node has 3 GPUs
        wait_for("PodScheduled=False", lambda: any(
            c["type"] == "PodScheduled" and c["status"] == "False"
            for c in sandbox.pod(ns, "greedy").get("status", {}).get("conditions") or []))  # fmt: skip
        described = sandbox.kubectl("describe", "pod", "greedy", "-n", ns).stdout
        assert "FailedScheduling" in described and "no node fits 3 whole GPUs" in described, described


def test_drain_evicts_and_a_victims_gpus_wait_for_its_graceful_termination(sandbox: SandboxEnv) -> None:
    on_node_1 = {"kubernetes.io/hostname": "gpu-node-1"}
    with sandbox.namespace() as ns:
        # kubectl drain goes through the Eviction API; the victim stays Terminating for its grace period.
        sandbox.apply(ns, pod("victim", gpus=1, grace_s=6, node_selector=on_node_1))
        (held,) = sandbox.assignment(sandbox.running(ns, "victim")).gpus
        wait_for("victim Ready", lambda: _ready(sandbox.pod(ns, "victim")))  # the kubelet's start is over
        began = time.monotonic()
        drain = subprocess.Popen(
            [str(sandbox.kubectl_bin), f"--kubeconfig={sandbox.state.kubeconfig}", "drain", "gpu-node-1",
             "--force", "--ignore-daemonsets", "--timeout=60s"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            terminating = wait_for(
                "victim Terminating", lambda: sandbox.pod(ns, "victim")["metadata"].get("deletionTimestamp")
            )
            assert terminating and sandbox.phase(ns, "victim") == "Running"
            # Still on its GPU while it terminates, also once the scheduler has seen it deleted (it left the
            # plan: its share is free for pipelining, but the gauge says what is on the GPU).
            gauge = ("gpu-node-1", str(held.index))
            watched = time.monotonic()
            while time.monotonic() - watched < 2.5 and sandbox.phase(ns, "victim") == "Running":
                assert sandbox.gpu_allocated_fraction()[gauge] == 1.0  # still held
                time.sleep(0.25)
            out, _ = drain.communicate(timeout=60)
            wait_for("the gauge shows the GPU free once the victim is gone",
                     lambda: sandbox.gpu_allocated_fraction()[gauge] == 0.0)  # fmt: skip
        finally:
            if drain.poll() is None:
                drain.kill()
            sandbox.kubectl("uncordon", "gpu-node-1")
        assert drain.returncode == 0, out
        assert f"evicting pod {ns}/victim" in out and time.monotonic() - began >= 6

        # The GPUs of a victim are reused only once it is gone: node 2 cordoned, a pod waits for node 1's
        # two GPUs while their holder is evicted (Eviction API) with a 4 s grace period.
        sandbox.kubectl("cordon", "gpu-node-2")
        try:
            sandbox.apply(ns, pod("holder", gpus=2, grace_s=4))
            holder = sandbox.assignment(sandbox.running(ns, "holder"))
            sandbox.apply(ns, pod("waiter", gpus=2))
            eviction = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "holder", "namespace": ns},
            }
            evicted = time.monotonic()
            sandbox.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/holder/eviction", "-f", "-",
                            input=json.dumps(eviction))  # fmt: skip
            while True:
                # The waiter is read first: bound then, with the holder still running after, is the
                # violation (read the other way round, a bind right after the holder stopped would be one
                # too). The holder stops holding its GPUs when its containers are dead: the kubelet reports
                # it Failed (killed at the end of its grace period), then deletes it.
                bound = sandbox.pod(ns, "waiter")["spec"].get("nodeName")
                got = sandbox.kubectl(
                    "get", "pod", "holder", "-n", ns, "-o", "jsonpath={.status.phase}", check=False
                )
                if got.returncode != 0 or got.stdout in ("Failed", "Succeeded"):
                    break
                assert not bound, "bound while the victim held its GPUs"
                time.sleep(0.2)
            assert time.monotonic() - evicted >= 3.5  # it lived out its 4 s grace period
            waiter = sandbox.assignment(sandbox.running(ns, "waiter"))
            assert waiter.node == holder.node and {g.uuid for g in waiter.gpus} == {
                g.uuid for g in holder.gpus
            }
        finally:
            sandbox.kubectl("uncordon", "gpu-node-2")


def _ready(obj: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in obj["status"].get("conditions") or [])


def test_a_refused_allocate_fails_the_pod_as_the_kubelet_does(sandbox: SandboxEnv) -> None:
    """A GPU pod put on a node by hand (no scheduler, so no assignment) gets a GPU nobody uses, as NVIDIA's
    plugin would (test_handoff.py); where none is left (both GPUs of gpu-node-2 carry fractions Tessera
    placed) the device plugin refuses its Allocate and the kubelet fails it with UnexpectedAdmissionError and
    the plugin's words."""
    node_2 = {"kubernetes.io/hostname": "gpu-node-2"}
    with sandbox.namespace() as ns:
        sandbox.apply(ns, *(pod(f"f{i}", annotations={"gpu-fraction": "0.6"}, node_selector=node_2)
                            for i in range(2)))  # fmt: skip
        uuids = {sandbox.assignment(sandbox.running(ns, f"f{i}")).gpus[0].uuid for i in range(2)}
        assert len(uuids) == 2  # one on each GPU
        body = pod("pinned", gpus=1)
        body["spec"]["nodeName"] = "gpu-node-2"
        del body["spec"]["schedulerName"]
        sandbox.apply(ns, body)
        failed = wait_for("pod Failed", lambda: sandbox.phase(ns, "pinned") == "Failed", 30)
        assert failed
        status = sandbox.pod(ns, "pinned")["status"]
        assert status["reason"] == "UnexpectedAdmissionError"
        assert status["message"].startswith(
            "Pod was rejected: Allocate failed due to rpc error: code = FailedPrecondition desc = tessera: "
            f"pod {ns}/pinned was not placed by the Tessera scheduler and gets only a GPU nobody uses, "
            "but the kubelet offered "
        )
        assert status["message"].endswith(", which is unexpected")
        described = sandbox.kubectl("describe", "pod", "pinned", "-n", ns).stdout
        assert "UnexpectedAdmissionError" in described
        for i in range(2):  # the fractions were not disturbed
            assert sandbox.phase(ns, f"f{i}") == "Running"


def test_every_component_runs_as_the_identity_the_chart_gives_it(sandbox: SandboxEnv) -> None:
    expected = {"tessera-scheduler": ("system:serviceaccount:tessera-system:tessera-scheduler", None)}
    for node in ("gpu-node-1", "gpu-node-2"):
        expected[f"kubelet/{node}"] = (f"system:node:{node}", None)
        for part in ("agent", "device-plugin"):
            expected[f"{part}/{node}"] = (f"system:serviceaccount:tessera-system:tessera-{part}", node)
    records = {r.name: r for r in ProcessTable(Path(sandbox.state.data_dir)).records()}
    for name, (user, node) in expected.items():
        (kubeconfig,) = [a.split("=", 1)[1] for a in records[name].argv if a.startswith("--kubeconfig=")]
        review = json.loads(sandbox.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout)
        info = review["status"]["userInfo"]
        assert info["username"] == user, name
        if node is not None:  # a token bound to the Node carries its name, as a DaemonSet pod's token does
            assert info["extra"]["authentication.kubernetes.io/node-name"] == [node], name
        if user.startswith("system:node:"):
            assert "system:nodes" in info["groups"]
