"""`tessera bench allocate`: the device plugin's Allocate latency, N pods allocated one after another on one
node, through its real gRPC socket, its real pod watch and the real Kubernetes client against a real API
server (a kubeconfig's, or a throw-away local control plane from `scheduler/sandbox`).

For each pod the "scheduler" part (untimed) creates it bound to the node with its assignment, as the
Binding leaves it, and waits for the plugin's watch to show it (the kubelet sees a pod at about the same
time); the timed part is what the kubelet waits for: GetPreferredAllocation, then Allocate. No kubelet runs,
so there is no PodResources API: the plugin finds the pod from its watch alone, and no pod is confirmed.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from device_plugin.allocator import Allocator
from device_plugin.cluster import KubePodCluster
from device_plugin.endpoint import PluginEndpoint
from device_plugin.inventory import Inventory
from device_plugin.resources import Resource
from device_plugin.service import DevicePluginService
from device_plugin.v1beta1 import api_pb2, api_pb2_grpc
from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, GPU_SLICE_RESOURCE, MILLI_PER_GPU

NAMESPACE = "default"


def _local_control_plane(stack: ExitStack) -> Path:
    """A throw-away real control plane (etcd, kube-apiserver, controller-manager) from the binaries of
    scripts/build_control_plane.sh; returns its admin kubeconfig."""
    from scheduler.sandbox import assets
    from scheduler.sandbox.controlplane import ControlPlane

    try:
        folder = assets.require()
    except assets.AssetsMissing as exc:
        raise RuntimeError(f"no --kubeconfig given and no local control plane: {exc}") from None
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tdp-bench-cp-")))
    cp = ControlPlane(folder, workdir).start()
    stack.callback(cp.stop)
    return cp.admin_kubeconfig


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


def _pod(name: str, node: str, assignment: GPUAssignment) -> k8s.V1Pod:
    """A fractional pod as the webhook and the Binding leave it: one slice, bound, with its assignment."""
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, annotations={GPU_ASSIGNMENT: assignment.to_annotation()}),
        spec=k8s.V1PodSpec(
            node_name=node,
            scheduler_name="tessera",
            containers=[
                k8s.V1Container(
                    name="main",
                    image="cuda",
                    resources=k8s.V1ResourceRequirements(limits={GPU_SLICE_RESOURCE: "1"}),
                )
            ],
        ),
    )


def run_allocate_bench(
    *, pods: int, gpu_spec: str, kubeconfig: str | None, node_name: str, namespace: str = NAMESPACE
) -> dict[str, Any]:
    from node_agent.nvml import open_backend

    if pods < 1:
        raise ValueError("--pods must be at least 1")
    with ExitStack() as stack:
        config = kubeconfig or str(_local_control_plane(stack))
        core = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=config))
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
        watch = KubePodCluster.connect(kubeconfig=config).watch_node(node_name).start()
        stack.callback(watch.stop)
        if not watch.synced.wait(30):
            raise RuntimeError(f"the pod watch of node {node_name} did not sync")
        allocator = Allocator(node_name, inventory, watch, pod_wait_s=1.0)
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
            created = core.create_namespaced_pod(namespace, _pod(name, node_name, assignment))
            assert created.metadata is not None and created.metadata.uid is not None
            uid = created.metadata.uid
            deadline = time.monotonic() + 10
            while watch.get(uid) is None and time.monotonic() < deadline:
                watch.wait_change(watch.version, 0.1)
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
        return {
            "pods_on_node": pods,
            "gpus": gpu_spec,
            "fraction_per_pod": milli / MILLI_PER_GPU,
            "api_server": "local control plane (scheduler/sandbox)" if kubeconfig is None else config,
            "allocate_ms": _summary(allocate_s),
            "get_preferred_allocation_ms": _summary(preferred_s),
        }
