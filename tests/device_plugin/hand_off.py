"""The scheduler's side of the hand-off, played through the real client against an API server: pods with
assignments, the node's bind lock, the binding."""

from __future__ import annotations

from kubernetes import client as k8s

from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.bind_lock import BindLock
from scheduler.api.keys import BIND_LOCK, GPU_ALLOCATED, GPU_ASSIGNMENT
from tests.fakes.kubeapi import FakeKubeAPI

NODE = "gpu-node-1"


class Scheduler:
    """Plays the scheduler's side of the hand-off through the real client: pods with assignments, locks."""

    def __init__(self, api: FakeKubeAPI, node: str = NODE) -> None:
        self.api = api
        self.core = k8s.CoreV1Api(api.client())
        self.node = node
        self.core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=node)))

    def bind(self, name: str, gpus: list[AssignedGPU], *, node: str | None = None, lock: bool = True) -> str:
        """Create the pod with its assignment and, as the scheduler's binder does, lock the node then bind
        it there (with `lock=False` the pod waits unbound until `place`)."""
        assignment = GPUAssignment(node=node or self.node, gpus=gpus)
        # What the pod asks for, as the webhook leaves it: one slice per GPU of a fraction, or the GPUs.
        resource = "nvidia.com/gpu" if assignment.whole_gpus else "tessera.dev/gpu-slice"
        limits = {resource: str(len(gpus))}
        pod = self.core.create_namespaced_pod(
            "default",
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(
                    name=name, annotations={GPU_ASSIGNMENT: assignment.to_annotation()}
                ),
                spec=k8s.V1PodSpec(
                    scheduler_name="tessera",
                    containers=[
                        k8s.V1Container(
                            name="main", image="cuda", resources=k8s.V1ResourceRequirements(limits=limits)
                        )
                    ],
                ),
            ),
        )
        assert pod.metadata is not None and pod.metadata.uid is not None
        if lock:
            self.place(name, pod.metadata.uid)
        return str(pod.metadata.uid)

    def place(self, name: str, uid: str) -> None:
        self.lock(name, uid)
        binding = k8s.V1Binding(
            metadata=k8s.V1ObjectMeta(name=name, uid=uid),
            target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=self.node),
        )
        self.core.create_namespaced_pod_binding(name, "default", binding, _preload_content=False)

    def lock(self, name: str, uid: str) -> None:
        value = BindLock.for_pod("default", name, uid).to_annotation()
        self.core.patch_node(self.node, {"metadata": {"annotations": {BIND_LOCK: value}}})

    def lock_holder(self) -> str | None:
        raw = (self.api.get("nodes", self.node)["metadata"].get("annotations") or {}).get(BIND_LOCK)
        return None if raw is None else BindLock.from_annotation(raw).pod

    def allocated(self, name: str) -> bool:
        return GPU_ALLOCATED in (self.api.get("pods", name, "default")["metadata"].get("annotations") or {})
