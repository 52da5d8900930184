"""An in-memory `PodCluster` for unit tests of the allocation logic (the gRPC tests use a real API server)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from device_plugin.cluster import ClusterError, PodView
from scheduler.api.keys import GPU_ALLOCATED


@dataclass
class MemCluster:
    locks: dict[str, str] = field(default_factory=dict)
    pods: dict[tuple[str, str], PodView] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    fail_reads: bool = False
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def add_pod(self, pod: PodView) -> None:
        self.pods[(pod.namespace, pod.name)] = pod

    def read_bind_lock(self, node: str) -> str | None:
        self.calls.append(f"read_lock {node}")
        if self.fail_reads:
            raise ClusterError("HTTP 500: etcd is on fire")
        return self.locks.get(node)

    def read_pod(self, namespace: str, name: str) -> PodView | None:
        self.calls.append(f"read_pod {namespace}/{name}")
        return self.pods.get((namespace, name))

    def pods_on_node(self, node: str) -> list[PodView]:
        self.calls.append(f"list {node}")
        return [p for p in self.pods.values() if p.node_name == node]

    def mark_allocated(self, pod: PodView, when: str) -> None:
        self.calls.append(f"mark {pod.namespace}/{pod.name}")
        with self._mutex:
            current = self.pods.get((pod.namespace, pod.name))
            if current is None or current.uid != pod.uid:
                raise ClusterError("gone")
            self.pods[(pod.namespace, pod.name)] = replace(
                current, annotations={**current.annotations, GPU_ALLOCATED: when}
            )

    def release_bind_lock(self, node: str, raw: str) -> bool:
        self.calls.append(f"release {node}")
        with self._mutex:
            if self.locks.get(node) != raw:
                return False
            del self.locks[node]
            return True
