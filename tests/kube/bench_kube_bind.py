"""Throughput of the real cycle through the Kubernetes adapter, against a real kube-apiserver (etcd,
kube-apiserver and controller-manager on loopback, the scheduler as its ServiceAccount).

    .venv/bin/python -m tests.kube.bench_kube_bind [nodes] [gpus_per_node] [pods]

Fractional pods (0.5 GPU) are created at once; the clock runs until every pod that fits is bound and
allocated (the kubelet stand-in frees each node's bind lock as soon as the pod holds it).
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from pathlib import Path

from kubernetes import client

from scheduler.cycle import SchedulerConfig
from scheduler.sandbox import assets
from scheduler.sandbox.controlplane import ControlPlane
from tests.controlplane.install import install
from tests.controlplane.scene import Scene, runner_config, wait_until
from tests.kube.helpers import pod_body


def main(nodes: int = 20, gpus: int = 8, pods: int = 200) -> None:
    with ControlPlane(assets.require(), Path(tempfile.mkdtemp(prefix="tessera-bench-"))) as cp:
        tessera = install(cp)
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        core = client.CoreV1Api(cp.client())
        core.create_namespace({"metadata": {"name": ns}})
        wait_until(lambda: core.list_namespaced_service_account(ns).items, timeout=30)
        scene = Scene(cp, tessera, ns)
        for i in range(nodes):
            scene.node(f"gpu-{i:03d}", gpus=gpus)
        kubelet = scene.kubelet()
        config = runner_config(
            cycle_interval_s=0.02, scheduler=SchedulerConfig(expected_nodes=nodes, max_gpus_per_node=gpus)
        )
        runner = scene.scheduler(config)
        fits = min(pods, nodes * gpus * 2)
        t0 = time.perf_counter()
        for i in range(pods):
            scene.create_pod(pod_body(f"p-{i:05d}", annotations={"gpu-fraction": "0.5"}))
        created = time.perf_counter() - t0
        while len(kubelet.allocated) < fits and time.perf_counter() - t0 < 300:
            time.sleep(0.01)
        elapsed = time.perf_counter() - t0
        done, cycles = len(kubelet.allocated), runner.cycles
        hist = runner.metrics.cycle_seconds.collect()[0].samples
        total = next(s.value for s in hist if s.name.endswith("_sum"))
        count = next(s.value for s in hist if s.name.endswith("_count"))
        scene.cleanup()
        print(
            f"nodes={nodes} gpus/node={gpus} pods={pods} bound+allocated={done} in {elapsed:.2f}s "
            f"(creating took {created:.2f}s) -> {done / elapsed:.0f} pods/s; {cycles} cycles, "
            f"mean cycle {1000 * total / max(count, 1):.1f} ms"
        )
        cp.stop(remove=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
