"""Issue 29's three repros on real kubelets: what Tessera binds, the kubelet admits. A Deployment with more
replicas than the nodes have pod slots, a pod asking for more ephemeral-storage than a node has, and a
Deployment whose replicas may not share a node: the pods that fit run, the others stay Pending with
kube-scheduler's reasons, and no kubelet refuses a pod (before issue 29 the kubelet failed the extra
replicas with OutOfpods, and the big pod with OutOfephemeral-storage).

The module's own sandbox: 2 real kubelets with 4 pod slots each (`tessera sandbox up --max-pods 4`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.utils import parse_quantity

from tests.sandbox.env import SandboxEnv, pod, wait_for

pytestmark = pytest.mark.apiserver

SLOTS = 4
NODES = ("gpu-node-1", "gpu-node-2")


@pytest.fixture(scope="module")
def box(new_sandbox: Any) -> SandboxEnv:
    sandbox: SandboxEnv = new_sandbox(len(NODES), "1xA100-40GB", max_pods=SLOTS)
    return sandbox


def _deployment(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    template = pod(name, labels={"app": name})
    template["spec"].update(restartPolicy="Always", **spec)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]},
        },
    }


def _pods(box: SandboxEnv, ns: str, app: str) -> list[dict[str, Any]]:
    out = box.kubectl("get", "pods", "-n", ns, "-l", f"app={app}", "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def _scheduled_message(p: dict[str, Any]) -> str:
    conds = p.get("status", {}).get("conditions") or []
    return str(next((c.get("message", "") for c in conds if c["type"] == "PodScheduled"), ""))


def _refused_by_a_kubelet(box: SandboxEnv, ns: str) -> list[str]:
    """Pods a kubelet failed at admission (OutOfpods, OutOfcpu, OutOfephemeral-storage...)."""
    items = json.loads(box.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    return [
        f"{p['metadata']['name']}: {p['status'].get('reason')} {p['status'].get('message', '')}"
        for p in items
        if p.get("status", {}).get("phase") == "Failed"
    ]


def _used_slots(box: SandboxEnv) -> dict[str, int]:
    items = json.loads(box.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    used = dict.fromkeys(NODES, 0)
    for p in items:
        node = p["spec"].get("nodeName")
        if node in used and p.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            used[node] += 1
    return used


def test_replicas_beyond_the_nodes_pod_slots_wait_instead_of_failing_at_the_kubelet(box: SandboxEnv) -> None:
    free = sum(SLOTS - n for n in _used_slots(box).values())
    with box.namespace() as ns:
        box.apply(ns, _deployment("web", free + 3))

        def settled() -> list[dict[str, Any]] | None:
            pods = _pods(box, ns, "web")
            running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
            pending = [p for p in pods if "Too many pods" in _scheduled_message(p)]
            return pods if len(running) == free and len(pending) == 3 else None

        wait_for(f"{free} replicas running and 3 pending for pod slots", settled, timeout_s=90)
        assert all(n <= SLOTS for n in _used_slots(box).values())
        assert not _refused_by_a_kubelet(box, ns)
        waiting = next(p for p in _pods(box, ns, "web") if not p["spec"].get("nodeName"))
        assert f"{len(NODES)} Too many pods" in _scheduled_message(waiting), _scheduled_message(waiting)


def test_more_ephemeral_storage_than_a_node_has_stays_pending(box: SandboxEnv) -> None:
    node = json.loads(box.kubectl("get", "node", NODES[0], "-o", "json").stdout)
    most = max(
        parse_quantity(json.loads(box.kubectl("get", "node", n, "-o", "json").stdout)["status"]["allocatable"][
            "ephemeral-storage"
        ])
        for n in NODES
    )  # fmt: skip
    assert node["status"]["allocatable"]["ephemeral-storage"]  # the real kubelet measures its disk
    with box.namespace() as ns:
        big = pod("big")
        big["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = str(int(most) + 2**30)
        box.apply(ns, big)
        message = wait_for(
            "big pending for ephemeral-storage",
            lambda: (
                (m := _scheduled_message(box.pod(ns, "big"))) and "Insufficient ephemeral-storage" in m and m
            ),
        )
        assert f"{len(NODES)} Insufficient ephemeral-storage" in message, message
        assert not box.pod(ns, "big")["spec"].get("nodeName")
        assert not _refused_by_a_kubelet(box, ns)


def test_a_required_anti_affinity_deployment_puts_one_replica_per_node(box: SandboxEnv) -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    with box.namespace() as ns:
        box.apply(ns, _deployment("spread", len(NODES) + 1, affinity=anti))

        def settled() -> list[dict[str, Any]] | None:
            pods = _pods(box, ns, "spread")
            running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
            waiting = [p for p in pods if "anti-affinity" in _scheduled_message(p)]
            return pods if len(running) == len(NODES) and len(waiting) == 1 else None

        pods = wait_for("one replica per node, one waiting", settled, timeout_s=60)
        assert sorted(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")) == list(NODES)
        waiting = next(p for p in pods if not p["spec"].get("nodeName"))
        assert f"{len(NODES)} node(s) didn't match pod anti-affinity rules" in _scheduled_message(waiting)
        assert not _refused_by_a_kubelet(box, ns)
