"""Throughput of the real cycle through the Kubernetes adapter, over HTTP to the fake API server.

    /work/venv/bin/python -m tests.kube.bench_kube_bind [nodes] [gpus_per_node] [pods]

Fractional pods (0.5 GPU) are created at once; the clock runs until every pod that fits is bound and
allocated (a fake kubelet/device plugin frees each node's bind lock as soon as it sees the pod).
"""

from __future__ import annotations

import sys
import time

from kubernetes import client

from scheduler.cycle import SchedulerConfig
from scheduler.kube.runner import RunnerConfig, SchedulerRunner
from tests.fakes.kubeapi import FakeKubeAPI
from tests.kube.helpers import FakeKubelet, node_body, pod_body


def main(nodes: int = 20, gpus: int = 8, pods: int = 200) -> None:
    with FakeKubeAPI(bookmark_interval=1.0) as api:
        for i in range(nodes):
            api.seed(node_body(f"gpu-{i:03d}", gpus=gpus))
        config = RunnerConfig(
            cycle_interval_s=0.02,
            leader_elect=False,
            sync_timeout_s=10,
            scheduler=SchedulerConfig(expected_nodes=nodes, max_gpus_per_node=gpus),
        )
        runner = SchedulerRunner(api.client(), config).start()
        kubelet = FakeKubelet(api, interval=0.1).start()
        core = client.CoreV1Api(api.client())
        fits = min(pods, nodes * gpus * 2)
        t0 = time.perf_counter()
        for i in range(pods):
            core.create_namespaced_pod(
                "default", pod_body(f"p-{i:05d}", annotations={"gpu-fraction": "0.5"}), _preload_content=False
            )
        created = time.perf_counter() - t0
        while len(kubelet.allocated) < fits and time.perf_counter() - t0 < 300:
            time.sleep(0.01)
        elapsed = time.perf_counter() - t0
        kubelet.stop()
        cycles = runner.cycles
        runner.stop()
        hist = runner.metrics.cycle_seconds.collect()[0].samples
        total = next(s.value for s in hist if s.name.endswith("_sum"))
        count = next(s.value for s in hist if s.name.endswith("_count"))
        requests = len(api.requests)
        print(
            f"nodes={nodes} gpus/node={gpus} pods={pods} bound+allocated={len(kubelet.allocated)} "
            f"in {elapsed:.2f}s (creating took {created:.2f}s) -> {len(kubelet.allocated) / elapsed:.0f} pods/s; "
            f"{cycles} cycles, mean cycle {1000 * total / max(count, 1):.1f} ms; {requests} API requests"
        )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
