"""Asynchronous binding on the real kube-apiserver, through the fault proxy: a bind the server refuses is
forgotten (the resources the cycle assumed for it are free again) and the pod is placed again by the next
cycle; a gang whose bind fails part-way is undone at once, never left partly running; and a bind costs one
request, the Binding (no node is written: DESIGN.md step 3 has no bind lock)."""

from __future__ import annotations

import time

import pytest

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT, POD_GROUP
from scheduler.cache.ledger import HoldKind
from scheduler.model.reasons import Reason
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.scene import Scene, wait_until
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver

WHOLE = {"nvidia.com/gpu": "1"}


def test_a_failed_bind_is_forgotten_and_the_pod_placed_again(scene: Scene, fault_proxy: FaultProxy) -> None:
    """One GPU, one pod asking for it: were the assumption of the failed bind kept, the retry would find the
    GPU taken by it and the pod would wait for ever."""
    scene.node("n1", gpus=1, device_plugin=False)
    runner = scene.scheduler(api=fault_proxy.client(scene.tessera.scheduler_token))
    fault_proxy.fail("POST", r"/pods/p/binding$", 500, "etcd timeout")
    scene.create_pod(pod_body("p", limits=WHOLE))
    wait_until(lambda: scene.bound().get("p"), timeout=15)
    # The proxy logs a request once the server's answer is back to it: possibly after the watch showed it.
    binds = wait_until(lambda: (b := fault_proxy.requests_matching("POST", r"/pods/p/binding$"))[1:] and b)
    assert [(r.status, r.injected) for r in binds] == [(500, True), (201, False)]
    a = GPUAssignment.from_annotation(scene.pod("p")["metadata"]["annotations"][GPU_ASSIGNMENT])
    assert (a.node, [g.milli for g in a.gpus]) == ("n1", [1000])
    uid = scene.pod("p")["metadata"]["uid"]
    # The scheduler's books: one holding, confirmed once the outcome arrived; the GPU used once.
    wait_until(lambda: runner.scheduler.cache.ledger.pods.get(uid, None) is not None
               and runner.scheduler.cache.ledger.pods[uid].kind is HoldKind.BOUND)  # fmt: skip
    state = runner.scheduler.cache.state
    row = state.row_of("n1")
    assert row is not None and int(state.free_milli[row, 0]) == 0
    assert len(runner.scheduler.cache.inflight) == 0


def test_a_gang_whose_bind_fails_part_way_is_undone_at_once(scene: Scene, fault_proxy: FaultProxy) -> None:
    """Two members on two nodes; the server refuses one member's Binding. The member already bound is
    evicted in the same cycle the failure is learnt (not 60 s later by stale-gang eviction) and nobody runs
    alone; once the member is back (as its controller would recreate it) the gang is bound whole."""
    scene.node("n1", gpus=1, device_plugin=False)
    scene.node("n2", gpus=1, device_plugin=False)
    scene.kubelet()  # confirms the eviction's deletion, as the node would
    scene.podgroup("g", {"minMember": 2})
    runner = scene.scheduler(api=fault_proxy.client(scene.tessera.scheduler_token))
    fault_proxy.fail("POST", r"/pods/g-1/binding$", 500, "etcd timeout")
    member = {"annotations": {POD_GROUP: "g"}, "limits": WHOLE}
    scene.create_pod(pod_body("g-0", **member))  # type: ignore[arg-type]
    scene.create_pod(pod_body("g-1", **member))  # type: ignore[arg-type]
    refused = wait_until(lambda: fault_proxy.requests_matching("POST", r"/pods/g-1/binding$"), timeout=15)
    failed_at = time.monotonic()
    assert refused[0].status == 500
    wait_until(lambda: fault_proxy.requests_matching("POST", r"/pods/g-0/eviction$"), timeout=10)
    assert time.monotonic() - failed_at < 10  # undone at once, not after the stale-gang grace period
    wait_until(lambda: scene.find_pod("g-0") is None, timeout=15)
    events = {e["reason"]: e["message"] for e in scene.events_for("g-0")}
    assert "bound whole or not at all" in events["Evicted"] and "g-1" in events["Evicted"]
    # Nobody runs alone, and the scheduler holds nothing for the gang: g-1 waits for its missing member.
    wait_until(lambda: runner.scheduler.last_reasons.get(scene.pod("g-1")["metadata"]["uid"]) is not None
               and runner.scheduler.last_reasons[scene.pod("g-1")["metadata"]["uid"]].reason
               is Reason.GANG_INCOMPLETE)  # fmt: skip
    assert scene.bound() == {}
    assert not runner.scheduler.cache.ledger.pods and len(runner.scheduler.cache.inflight) == 0
    scene.create_pod(pod_body("g-0", **member))  # type: ignore[arg-type]
    wait_until(lambda: set(scene.bound()) == {"g-0", "g-1"}, timeout=15)
    assert sorted(scene.gpu_use()) == [("n1", 0), ("n2", 0)]


def test_gang_members_on_one_node_served_by_tessera_bind_together(scene: Scene) -> None:
    """A gang of two halves that fits only on one GPU of a node served by Tessera's device plugin: its members
    are bound together (one job may have several pods waiting for the plugin on a node; the plugin asks the
    kubelet which one it admits), and the gang is not undone."""
    scene.node("n1", gpus=1)
    kubelet = scene.kubelet()
    scene.podgroup("h", {"minMember": 2})
    scene.scheduler()
    for i in range(2):
        scene.create_pod(pod_body(f"h-{i}", annotations={POD_GROUP: "h", "gpu-fraction": "0.5"}))
    wait_until(lambda: len(kubelet.allocated) == 2, timeout=20)
    assert set(scene.bound()) == {"h-0", "h-1"}
    assert scene.gpu_use() == {("n1", 0): 1000}
    assert all(GPU_ALLOCATED in scene.pod(f"h-{i}")["metadata"]["annotations"] for i in range(2))
    assert not [e for name in ("h-0", "h-1") for e in scene.events_for(name) if e["reason"] == "Evicted"]


def test_every_bind_costs_one_request(scene: Scene, fault_proxy: FaultProxy) -> None:
    """Only the scheduler talks through the proxy, so its writes are all there is to count: one Binding per
    pod, on a node NVIDIA's plugin serves or one Tessera's does (no node written); the next pod for
    Tessera's plugin on that node is bound once the plugin (here the kubelet stand-in, with the plugin's
    identity) marked the one before allocated."""
    scene.node("plain", gpus=2, device_plugin=False)  # NVIDIA's device plugin serves its GPUs
    scene.kubelet()
    runner = scene.scheduler(api=fault_proxy.client(scene.tessera.scheduler_token))
    nodes = runner.cluster.informers["Node"]

    def ready(name: str) -> bool:
        """The cycle knows the node's GPUs, and it is not tainted not-ready any more."""
        node, state = nodes.get(name), runner.scheduler.cache.state
        row = state.row_of(name)
        return (
            node is not None
            and not (node.get("spec") or {}).get("taints")  # not-ready until the node controller saw it Ready
            and row is not None
            and bool(state.present[row, 0])
        )

    wait_until(lambda: ready("plain"), timeout=15)
    scene.create_pod(pod_body("w1", limits=WHOLE))
    wait_until(lambda: scene.bound().get("w1"), timeout=15)
    scene.core.patch_node("plain", {"spec": {"unschedulable": True}})
    scene.node("tess", gpus=2)  # Tessera's device plugin serves its GPUs
    wait_until(lambda: ready("tess"), timeout=15)
    for name, extra in (("w2", {"limits": WHOLE}), ("f1", {"annotations": {"gpu-fraction": "0.5"}})):
        scene.create_pod(pod_body(name, **extra))  # type: ignore[arg-type]
    wait_until(lambda: {"w2", "f1"} <= set(scene.bound()), timeout=15)
    mine = (f"/namespaces/{scene.ns}/pods/", "/nodes/")  # (a PodGroup left by an earlier test may be written)

    def written() -> list[tuple[str, str, int]]:
        return [(r.method, "/".join(r.path.split("/")[-2:]), r.status) for r in fault_proxy.requests
                if r.method in ("POST", "PATCH", "PUT", "DELETE") and any(m in r.path for m in mine)]  # fmt: skip

    # The proxy logs a request once the API server answered it: the watch may show the bind a moment before.
    writes = wait_until(lambda: (w := written()) and len(w) >= 3 and w, timeout=5)
    assert sorted(writes) == [("POST", "f1/binding", 201), ("POST", "w1/binding", 201),
                              ("POST", "w2/binding", 201)], writes  # fmt: skip
    reads = [
        r.path for r in fault_proxy.requests if r.method == "GET" and not r.watch and r.path.count("/") > 4
    ]
    assert reads == []  # no object read one by one: the watch caches answer what a bind needs to know
