"""Reading a pod's owners from the API server, with a small cache (owners change rarely)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

# Plurals of the owner kinds the podgrouper knows; others fall back to the lower-cased kind + "s".
PLURALS = {
    "ReplicaSet": "replicasets",
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
    "CronJob": "cronjobs",
    "PyTorchJob": "pytorchjobs",
    "TFJob": "tfjobs",
    "MPIJob": "mpijobs",
    "JAXJob": "jaxjobs",
    "XGBoostJob": "xgboostjobs",
    "RayCluster": "rayclusters",
    "RayJob": "rayjobs",
    "JobSet": "jobsets",
    "LeaderWorkerSet": "leaderworkersets",
    "Workflow": "workflows",
}


class ApiOwnerLookup:
    """An `OwnerLookup` over the API server: GET /apis/<group>/<version>/namespaces/<ns>/<plural>/<name>."""

    def __init__(self, api_client: client.ApiClient, ttl_s: float = 30.0) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.ttl_s = ttl_s
        self._cache: dict[tuple[str, str, str, str], tuple[float, Mapping[str, Any] | None]] = {}
        self._lock = threading.Lock()

    def __call__(self, namespace: str, api_version: str, kind: str, name: str) -> Mapping[str, Any] | None:
        key = (namespace, api_version, kind, name)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit and now - hit[0] < self.ttl_s:
                return hit[1]
        found = self._fetch(namespace, api_version, kind, name)
        with self._lock:
            self._cache[key] = (now, found)
        return found

    def _fetch(self, namespace: str, api_version: str, kind: str, name: str) -> Mapping[str, Any] | None:
        plural = PLURALS.get(kind, kind.lower() + "s")
        try:
            if (
                "/" not in api_version
            ):  # the core group (e.g. ReplicationController): no owner walk through it
                return None
            group, version = api_version.split("/", 1)
            resp: Any = self.custom.get_namespaced_custom_object(
                group, version, namespace, plural, name, _preload_content=False
            )
            data = json.loads(resp.data)
            return data if isinstance(data, dict) else None
        except (ApiException, ValueError):
            return None
