"""Allocate latency benchmark: N pods allocated one after another on one node, through real gRPC and the
real Kubernetes client against an API server (by default the local fake one from tests/fakes).

For each pod the "scheduler" part (untimed) creates the pod with its assignment and sets the node's bind
lock; the timed part is what the kubelet waits for: GetPreferredAllocation, then Allocate.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from device_plugin.allocator import Allocator
from device_plugin.cluster import KubePodCluster
from device_plugin.endpoint import PluginEndpoint
from device_plugin.inventory import Inventory
from device_plugin.resources import Resource
from device_plugin.service import DevicePluginService
from device_plugin.v1beta1 import api_pb2, api_pb2_grpc
from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.bind_lock import BindLock
from scheduler.api.keys import BIND_LOCK, GPU_ASSIGNMENT, GPU_SLICE_RESOURCE, MILLI_PER_GPU

NAMESPACE = "default"


def _local_api(stack: ExitStack) -> str:
    """Start the fake API server of a source checkout (tests/fakes/kubeapi.py under the current dir)."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        from tests.fakes import kubeapi
    except ImportError:
        raise RuntimeError(
            "no --kube-url given and tests/fakes/kubeapi.py is not importable: run from the repository root"
        ) from None
    # Go's net/http (the real API server) sets TCP_NODELAY on every connection; Python's http.server does
    # not, and then each keep-alive request waits ~40 ms for a delayed ACK, which would measure the fake.
    handler = getattr(kubeapi, "_Handler", None)
    if handler is not None:
        handler.disable_nagle_algorithm = True
    api = stack.enter_context(kubeapi.FakeKubeAPI())
    return str(api.url)


def _summary(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    cuts = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {
        "p50": round(cuts[49], 3),
        "p90": round(cuts[89], 3),
        "p99": round(cuts[98], 3),
        "max": round(ms[-1], 3),
        "mean": round(statistics.fmean(ms), 3),
    }


def run_bench(*, pods: int, gpu_spec: str, kube_url: str | None, node_name: str) -> dict[str, Any]:
    result: dict[str, Any]
    from node_agent.nvml import open_backend

    if pods < 1:
        raise ValueError("--pods must be at least 1")
    with ExitStack() as stack:
        url = kube_url or _local_api(stack)
        core = k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration(host=url)))
        try:
            core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=node_name)))
        except ApiException as exc:
            if exc.status != 409:
                raise RuntimeError(f"cannot create node {node_name}: HTTP {exc.status}") from None
        backend = open_backend(gpu_spec, seed=node_name)
        inventory = Inventory(backend.devices())
        gpus = inventory.gpus()
        if not gpus:
            raise ValueError(f"GPU spec {gpu_spec!r} has no GPUs")
        allocator = Allocator(node_name, inventory, KubePodCluster.connect(url), lock_wait_s=1.0)
        resource = Resource(GPU_SLICE_RESOURCE, "slice", MILLI_PER_GPU)
        plugin_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tdp-bench-")))
        endpoint = PluginEndpoint(
            plugin_dir, resource, DevicePluginService(resource, inventory, allocator, threading.Event())
        )
        endpoint.serve()
        stack.callback(endpoint.stop)
        channel = stack.enter_context(grpc.insecure_channel(f"unix://{endpoint.socket_path}"))
        stub = api_pb2_grpc.DevicePluginStub(channel)

        milli = max(1, min(MILLI_PER_GPU - 1, MILLI_PER_GPU * len(gpus) // pods))
        allocate_s: list[float] = []
        preferred_s: list[float] = []
        for i in range(pods):
            gpu = gpus[i % len(gpus)]
            assignment = GPUAssignment(
                node=node_name, gpus=[AssignedGPU(index=gpu.index, uuid=gpu.uuid, milli=milli)]
            )
            name = f"bench-{i}"
            pod = core.create_namespaced_pod(
                NAMESPACE,
                k8s.V1Pod(
                    metadata=k8s.V1ObjectMeta(
                        name=name, annotations={GPU_ASSIGNMENT: assignment.to_annotation()}
                    ),
                    spec=k8s.V1PodSpec(
                        node_name=node_name,
                        scheduler_name="tessera",
                        containers=[
                            k8s.V1Container(
                                name="main",
                                image="cuda",
                                # as the webhook leaves a fractional pod: one slice
                                resources=k8s.V1ResourceRequirements(limits={GPU_SLICE_RESOURCE: "1"}),
                            )
                        ],
                    ),
                ),
            )
            assert pod.metadata is not None and pod.metadata.uid is not None
            lock = BindLock.for_pod(NAMESPACE, name, pod.metadata.uid).to_annotation()
            core.patch_node(node_name, {"metadata": {"annotations": {BIND_LOCK: lock}}})
            available = [f"{g.uuid}::{k}" for g in gpus for k in range(i // len(gpus), i // len(gpus) + 2)]

            t0 = time.perf_counter()
            pref = stub.GetPreferredAllocation(
                api_pb2.PreferredAllocationRequest(
                    container_requests=[
                        api_pb2.ContainerPreferredAllocationRequest(
                            available_deviceIDs=available, allocation_size=1
                        )
                    ]
                ),
                timeout=10,
            )
            t1 = time.perf_counter()
            ids = list(pref.container_responses[0].deviceIDs)
            resp = stub.Allocate(
                api_pb2.AllocateRequest(
                    container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)]
                ),
                timeout=10,
            )
            t2 = time.perf_counter()
            preferred_s.append(t1 - t0)
            allocate_s.append(t2 - t1)
            got = resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"]
            if got != gpu.uuid or resource.gpu_uuid(ids[0]) != gpu.uuid:
                raise RuntimeError(f"pod {name}: got GPU {got} (slice {ids[0]}), assigned {gpu.uuid}")
        node = core.read_node(node_name)
        if node.metadata is None or BIND_LOCK in (node.metadata.annotations or {}):
            raise RuntimeError("the last bind lock was not released")
        result = {
            "pods_on_node": pods,
            "gpus": gpu_spec,
            "fraction_per_pod": milli / MILLI_PER_GPU,
            "api_server": "local fake (tests/fakes/kubeapi.py)" if kube_url is None else url,
            "allocate_ms": _summary(allocate_s),
            "get_preferred_allocation_ms": _summary(preferred_s),
        }
    return result
