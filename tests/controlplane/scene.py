"""One test's world on the shared control plane: its namespace, the cluster-scoped objects it creates
(Nodes, Queues, GPUNodeReports, webhook configurations), the schedulers and kubelet stand-ins it starts;
all stopped and removed, synchronously, when the test ends, so the next test starts from a clean cluster.

Objects are created as the admin (the test plays the user and the cluster operator); the components under
test run with the identity the chart gives them (`TesseraInstall`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, GPU_SLICE_RESOURCE, GROUP, MILLI_PER_GPU, VERSION
from scheduler.cycle import SchedulerConfig
from scheduler.kube.runner import RunnerConfig, SchedulerRunner
from scheduler.sandbox.controlplane import ControlPlane
from tests.controlplane.install import LEASE_NAME, RELEASE_NAMESPACE, TesseraInstall
from tests.controlplane.kubelet import KubeletStandIn

Obj = dict[str, Any]


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll until `predicate()` is truthy; return its value or fail with the predicate's name."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not met within {timeout}s: {getattr(predicate, '__name__', predicate)}")
        time.sleep(interval)


def _json(resp: Any) -> Any:
    try:
        return json.loads(resp.data)
    finally:
        resp.release_conn()


def runner_config(identity: str = "sched-a", *, leader_elect: bool = False, **kw: Any) -> RunnerConfig:
    """Short periods, so a test waits on conditions in tenths of a second."""
    values: dict[str, Any] = dict(
        identity=identity, cycle_interval_s=0.05, leader_elect=leader_elect,
        lease_namespace=RELEASE_NAMESPACE, lease_name=LEASE_NAME, lease_duration_s=2.0,
        renew_deadline_s=1.5, retry_period_s=0.1, sync_timeout_s=10, watch_timeout_s=60,
        backoff_initial_s=0.05, event_interval_s=30.0,
        scheduler=SchedulerConfig(expected_nodes=4, max_gpus_per_node=8),
    )  # fmt: skip
    values.update(kw)
    return RunnerConfig(**values)


class Scene:
    def __init__(self, cp: ControlPlane, tessera: TesseraInstall, namespace: str) -> None:
        self.cp = cp
        self.tessera = tessera
        self.ns = namespace
        self.admin = cp.client()
        self.core = client.CoreV1Api(self.admin)
        self.custom = client.CustomObjectsApi(self.admin)
        self._cluster_objects: list[tuple[str, str]] = []  # (plural or "nodes", name), deleted at the end
        self._stops: list[Callable[[], None]] = []
        self.nodes: set[str] = set()

    # ---- nodes and Tessera's objects ---------------------------------------------------------------------
    def node(
        self,
        name: str,
        *,
        gpus: int = 0,
        cpu: str = "32",
        memory: str = "256Gi",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        gpu_memory_mib: int = 81920,
        gpu_product: str = "NVIDIA-H100-80GB-HBM3",
        device_plugin: bool = True,
        gpu_labels: bool = True,
    ) -> Obj:
        """A Node as a kubelet registers it (capacity, allocatable, Ready), created by the admin.
        `gpu_labels=False`: no GPU Feature Discovery labels (GPU memory comes only from its GPUNodeReport)."""
        capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
        all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
            if device_plugin:  # Tessera's device plugin runs there: it registers its slice resource
                capacity[GPU_SLICE_RESOURCE] = str(gpus * MILLI_PER_GPU)
            if gpu_labels:
                all_labels.setdefault("nvidia.com/gpu.product", gpu_product)
                all_labels.setdefault("nvidia.com/gpu.memory", str(gpu_memory_mib))
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": all_labels, "annotations": annotations or {}},
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}],
            },
        }  # fmt: skip
        self._cluster_objects.append(("nodes", name))
        self.nodes.add(name)
        created: Obj = _json(self.core.create_node(body, _preload_content=False))
        if not created.get("status", {}).get("capacity"):  # not kept on create: as a kubelet, via status
            created = _json(
                self.core.patch_node_status(name, {"status": body["status"]}, _preload_content=False)
            )
        return created

    def node_obj(self, name: str) -> Obj:
        return dict(_json(self.core.read_node(name, _preload_content=False)))

    def queue(self, name: str, spec: Obj | None = None) -> Obj:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Queue", "metadata": {"name": name},
                "spec": spec or {}}  # fmt: skip
        self._cluster_objects.append(("queues", name))
        return dict(self.custom.create_cluster_custom_object(GROUP, VERSION, "queues", body))

    def gpu_report(self, node: str, gpus: list[Obj]) -> Obj:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUNodeReport", "metadata": {"name": node},
                "spec": {"node": node, "observedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                         "gpus": gpus}}  # fmt: skip
        self._cluster_objects.append(("gpunodereports", node))
        return dict(self.custom.create_cluster_custom_object(GROUP, VERSION, "gpunodereports", body))

    def podgroup(self, name: str, spec: Obj) -> Obj:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": name},
                "spec": spec}  # fmt: skip
        return dict(self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "podgroups", body))

    def get(self, plural: str, name: str, *, namespaced: bool = True) -> Obj:
        if namespaced:
            return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, plural, name))
        return dict(self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name))

    def track(self, plural: str, name: str) -> None:
        """Delete this cluster-scoped object when the test ends ("nodes", a Tessera plural, or
        "validatingwebhookconfigurations"/"mutatingwebhookconfigurations")."""
        self._cluster_objects.append((plural, name))

    def tenant(self, name: str = "tenant") -> tuple[client.ApiClient, Path]:
        """A tenant of this test's namespace, as a cluster gives one to a team: a ServiceAccount bound to the
        built-in `edit` ClusterRole there (with the chart's aggregated rules: PodGroups, reading queues).
        Returns its client and its kubeconfig (for kubectl)."""
        self.core.create_namespaced_service_account(self.ns, {"metadata": {"name": name}})
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{name}-edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.ns}],
        }  # fmt: skip
        client.RbacAuthorizationV1Api(self.admin).create_namespaced_role_binding(self.ns, binding)
        kubeconfig = self.cp.kubeconfig_for_service_account(self.ns, name, file_name=f"{self.ns}-{name}")
        api = self.cp.client(kubeconfig)
        pods = client.CoreV1Api(api)

        def can_edit() -> bool:  # RBAC (and the aggregation of the chart's rules into `edit`) has caught up
            try:
                pods.list_namespaced_pod(self.ns, limit=1)
                client.CustomObjectsApi(api).list_namespaced_custom_object(
                    GROUP, VERSION, self.ns, "podgroups"
                )
            except ApiException:
                return False
            return True

        wait_until(can_edit, timeout=20)
        return api, kubeconfig

    # ---- pods --------------------------------------------------------------------------------------------
    def create_pod(self, body: Obj) -> Obj:
        """Create through the API, as kubectl would (into this test's namespace)."""
        body = {**body, "metadata": {**body["metadata"], "namespace": self.ns}}
        return dict(_json(self.core.create_namespaced_pod(self.ns, body, _preload_content=False)))

    def find_pod(self, name: str) -> Obj | None:
        try:
            return dict(_json(self.core.read_namespaced_pod(name, self.ns, _preload_content=False)))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def pod(self, name: str) -> Obj:
        found = self.find_pod(name)
        assert found is not None, f"pod {self.ns}/{name} does not exist"
        return found

    def pods(self) -> list[Obj]:
        return list(_json(self.core.list_namespaced_pod(self.ns, _preload_content=False))["items"])

    def bound(self) -> dict[str, Obj]:
        return {p["metadata"]["name"]: p for p in self.pods() if p["spec"].get("nodeName")}

    def gpu_use(self) -> dict[tuple[str, int], int]:
        """Milli per (node, GPU index) over this namespace's bound pods' assignments."""
        use: dict[tuple[str, int], int] = defaultdict(int)
        for pod in self.bound().values():
            raw = (pod["metadata"].get("annotations") or {}).get(GPU_ASSIGNMENT)
            if raw:
                a = GPUAssignment.from_annotation(raw)
                assert a.node == pod["spec"]["nodeName"]
                for g in a.gpus:
                    use[(a.node, g.index)] += g.milli
        return dict(use)

    def events_for(self, name: str, kind: str | None = None, namespace: str | None = None) -> list[Obj]:
        selector = f"involvedObject.name={name}" + (f",involvedObject.kind={kind}" if kind else "")
        resp = self.core.list_namespaced_event(namespace or self.ns, field_selector=selector,
                                               _preload_content=False)  # fmt: skip
        return list(_json(resp)["items"])

    def pdb(self, name: str, selector: dict[str, str], min_available: int = 1) -> Obj:
        body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
                "spec": {"minAvailable": min_available, "selector": {"matchLabels": selector}}}  # fmt: skip
        policy = client.PolicyV1Api(self.admin)
        return dict(
            _json(policy.create_namespaced_pod_disruption_budget(self.ns, body, _preload_content=False))
        )

    def pdb_allows(self, name: str) -> int | None:
        """The disruption controller's verdict (status.disruptionsAllowed), once it has seen the budget."""
        policy = client.PolicyV1Api(self.admin)
        pdb = _json(policy.read_namespaced_pod_disruption_budget(name, self.ns, _preload_content=False))
        status = pdb.get("status") or {}
        if status.get("observedGeneration") != pdb["metadata"].get("generation"):
            return None
        return int(status.get("disruptionsAllowed", 0))

    # ---- components --------------------------------------------------------------------------------------
    def scheduler(
        self, config: RunnerConfig | None = None, *, api: client.ApiClient | None = None, start: bool = True
    ) -> SchedulerRunner:
        """The real scheduling loop with the scheduler's ServiceAccount (or `api`), stopped at the end."""
        runner = SchedulerRunner(api or self.tessera.scheduler_client(), config or runner_config())
        self._stops.append(runner.stop)
        return runner.start() if start else runner

    def kubelet(self, *, grace_s: float | None = 0.0) -> KubeletStandIn:
        """Plays the kubelet (and the device plugin's API writes) for this test's nodes."""
        standin = KubeletStandIn(self.admin, self.tessera.device_plugin_client(), self.nodes, grace_s=grace_s)
        self._stops.append(standin.stop)
        return standin.start()

    def on_cleanup(self, stop: Callable[[], None]) -> None:
        self._stops.append(stop)

    # ---- the end -----------------------------------------------------------------------------------------
    def cleanup(self) -> None:
        for stop in reversed(self._stops):
            with contextlib.suppress(Exception):
                stop()
        # Controllers first (else they recreate what is deleted), then the pods: bound pods would wait for a
        # kubelet to confirm their deletion, so they are removed at once and the next test never sees them.
        apps, batch = client.AppsV1Api(self.admin), client.BatchV1Api(self.admin)
        for delete in (
            apps.delete_collection_namespaced_deployment,
            apps.delete_collection_namespaced_replica_set,
            apps.delete_collection_namespaced_stateful_set,
            batch.delete_collection_namespaced_job,
        ):
            delete(self.ns, propagation_policy="Orphan")
        self.core.delete_collection_namespaced_pod(
            self.ns, body=client.V1DeleteOptions(grace_period_seconds=0)
        )
        wait_until(lambda: not self.pods(), timeout=30)
        coordination = client.CoordinationV1Api(self.admin)
        with contextlib.suppress(ApiException):
            coordination.delete_namespaced_lease(LEASE_NAME, RELEASE_NAMESPACE)
        admission = client.AdmissionregistrationV1Api(self.admin)
        for plural, name in reversed(self._cluster_objects):
            try:
                if plural == "nodes":
                    self.core.delete_node(name)
                elif plural == "validatingwebhookconfigurations":
                    admission.delete_validating_webhook_configuration(name)
                elif plural == "mutatingwebhookconfigurations":
                    admission.delete_mutating_webhook_configuration(name)
                else:
                    self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
