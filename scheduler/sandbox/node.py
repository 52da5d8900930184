"""The kubelet stand-in's Node: registration, status (capacity from the device plugins) and heartbeats.

As the kubelet does, it registers its Node with the `node.kubernetes.io/not-ready` taint (the node
lifecycle controller removes it once the node is Ready), renews its Lease in `kube-node-lease` every 10 s
(the controller marks a node whose Lease lapses NotReady and evicts its pods) and rewrites its status when
a device plugin's device list changes, else once a minute. Everything is done as `system:node:<name>`,
so the Node authorizer and NodeRestriction admission judge it as they judge a kubelet.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.sandbox.podstatus import now_rfc3339

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
STATUS_REFRESH_S = 60.0
MERGE_PATCH = "application/strategic-merge-patch+json"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


@dataclass(frozen=True)
class NodeSpec:
    """What the fake machine offers besides its devices (not the host's: a sandbox node is made up)."""

    name: str
    cpu: str = "32"
    memory: str = "256Gi"
    pods: str = "110"
    ephemeral_storage: str = "500Gi"
    kubelet_version: str = "v1.34.4"

    def base_resources(self) -> dict[str, str]:
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": self.pods,
            "ephemeral-storage": self.ephemeral_storage,
        }


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeStatus:
    def __init__(
        self,
        core: client.CoreV1Api,
        coordination: client.CoordinationV1Api,
        spec: NodeSpec,
        devices: Callable[[], dict[str, tuple[int, int]]],
    ) -> None:
        self.core = core
        self.coordination = coordination
        self.spec = spec
        self._devices = devices
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.uid = ""

    # ---- status ---------------------------------------------------------------------------------------
    def resources(self) -> tuple[dict[str, str], dict[str, str]]:
        """(capacity, allocatable): the machine's, plus per device resource its devices and healthy ones."""
        capacity = self.spec.base_resources()
        allocatable = dict(capacity)
        for name, (total, healthy) in self._devices().items():
            capacity[name] = str(total)
            allocatable[name] = str(healthy)
        return capacity, allocatable

    def status(self) -> dict[str, Any]:
        now = now_rfc3339()
        capacity, allocatable = self.resources()

        def condition(kind: str, value: str, reason: str, message: str) -> dict[str, str]:
            return {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }

        return {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"
                ),
                condition(
                    "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
                ),
                condition("Ready", "True", "KubeletReady", "kubelet stand-in is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": self.spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": self.spec.name,
                "systemUUID": self.spec.name,
                "bootID": self.spec.name,
                "kernelVersion": "",
                "osImage": f"Tessera sandbox node on {socket.gethostname()}",
                "containerRuntimeVersion": "none://0",
                "kubeletVersion": self.spec.kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register(self) -> None:
        """Create the Node (or take over the existing one, as a restarted kubelet does)."""
        labels = {
            "kubernetes.io/hostname": self.spec.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "tessera-sandbox",
        }
        body: Any = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.spec.name, "labels": labels},
            "spec": {"taints": [{"key": NOT_READY_TAINT, "effect": "NoSchedule"}]},
            "status": self.status(),
        }
        try:
            created = self.core.create_node(body, _preload_content=False)
            self.uid = str(_data(created)["metadata"]["uid"])
            log.info("registered node %s", self.spec.name)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = self.core.read_node(self.spec.name, _preload_content=False)
            self.uid = str(_data(current)["metadata"]["uid"])
            self.write_status()
            log.info("node %s already registered; status updated", self.spec.name)

    def write_status(self) -> None:
        self.core.patch_node_status(self.spec.name, {"status": self.status()}, _content_type=MERGE_PATCH)

    def devices_changed(self) -> None:
        self._changed.set()

    # ---- heartbeats -----------------------------------------------------------------------------------
    def start(self) -> NodeStatus:
        self._thread = threading.Thread(target=self._run, name="node-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        next_lease = next_status = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                if now >= next_lease:
                    self.renew_lease()
                    next_lease = now + LEASE_RENEW_S
                if self._changed.is_set() or now >= next_status:
                    self._changed.clear()
                    self.write_status()
                    next_status = now + STATUS_REFRESH_S
            except Exception as exc:  # the API server may be briefly away: keep beating
                log.warning("node %s heartbeat failed: %s", self.spec.name, str(exc).splitlines()[0])
                self._stop.wait(1.0)
            self._changed.wait(max(0.05, min(next_lease, next_status) - time.monotonic()))

    def renew_lease(self) -> None:
        name = self.spec.name
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": _micro_time()}
        try:
            lease = _data(
                self.coordination.read_namespaced_lease(name, LEASE_NAMESPACE, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": self.uid}
            body: Any = {
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]},
                "spec": spec,
            }
            self.coordination.create_namespaced_lease(LEASE_NAMESPACE, body)
            return
        update: Any = {
            "metadata": {"name": name, "resourceVersion": lease["metadata"]["resourceVersion"]},
            "spec": spec,
        }
        self.coordination.replace_namespaced_lease(name, LEASE_NAMESPACE, update)


def _data(resp: Any) -> dict[str, Any]:
    """The JSON body of a response read with `_preload_content=False`."""
    data = json.loads(resp.data)
    assert isinstance(data, dict)
    return data
