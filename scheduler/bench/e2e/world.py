"""The benchmark's world: the control plane (started, or reached through a kubeconfig), Tessera's CRDs and
RBAC from the rendered chart, a namespace, and N GPU nodes as Node objects (no kubelets: as scheduler_perf).

A control plane started here runs as scheduler_perf's does: no controller-manager, and the admission
plugins that need one (ServiceAccount), taint new nodes (TaintNodesByCondition) or resolve priority
classes (Priority) turned off.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from scheduler.api.keys import GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL, GPU_SLICE_RESOURCE, MILLI_PER_GPU
from scheduler.bench.e2e.config import E2EConfig
from scheduler.sandbox import assets, manifests
from scheduler.sandbox.controlplane import ControlPlane

RELEASE_NAMESPACE = "tessera-system"
SCHEDULER_SA = "tessera-scheduler"
_RBAC = {"Namespace", "PriorityClass", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
         "RoleBinding"}  # fmt: skip
APISERVER_ARGS = ("--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,Priority",)
GPU_MODEL = ("NVIDIA-A100-SXM4-80GB", 81920)
AFFINITY_MODELS = (GPU_MODEL, ("NVIDIA-H100-80GB-HBM3", 81920))


class WorldError(RuntimeError):
    """The control plane or the benchmark's objects could not be set up; the message says what."""


def _json(resp: Any) -> Any:
    try:
        return json.loads(resp.data)
    finally:
        resp.release_conn()


class BenchWorld:
    def __init__(self, cfg: E2EConfig) -> None:
        self.cfg = cfg
        self.cp: ControlPlane | None = None
        self.workdir = Path(tempfile.mkdtemp(prefix="tessera-bench-e2e-"))
        run = uuid.uuid4().hex[:8]
        self.namespace = ""  # the current run's (`create_namespace`)
        self.namespaces: list[str] = []
        self.node_names = [f"bench-{run}-{i:05d}" for i in range(cfg.nodes)]
        self.admin_kubeconfig: Path = Path(cfg.kubeconfig) if cfg.kubeconfig else self.workdir / "admin"
        self.api: client.ApiClient | None = None

    # ---- the control plane ----------------------------------------------------------------------------------
    def start(self) -> BenchWorld:
        if self.cfg.kubeconfig is None:
            folder = assets.require()
            self.cp = ControlPlane(folder, self.workdir / "cp", controller_manager=False,
                                   apiserver_args=APISERVER_ARGS).start()  # fmt: skip
            self.admin_kubeconfig = self.cp.admin_kubeconfig
        self.api = self.api_client()
        return self

    def api_client(self, *, connections: int = 32) -> client.ApiClient:
        conf = client.Configuration()
        config.load_kube_config(config_file=str(self.admin_kubeconfig), client_configuration=conf)
        conf.connection_pool_maxsize = connections
        return client.ApiClient(conf)

    @property
    def core(self) -> client.CoreV1Api:
        assert self.api is not None
        return client.CoreV1Api(self.api)

    def pid(self, component: str) -> int | None:
        """The pid of `kube-apiserver` or `etcd`: ours, else the only such process on this machine."""
        if self.cp is not None and component in self.cp.procs:
            return self.cp.procs[component].pid
        found = [pid for pid in _pids() if _comm(pid) == component]
        return found[0] if len(found) == 1 else None

    def stop(self) -> None:
        if self.cp is not None:
            self.cp.stop(remove=True)
            self.cp = None
        else:  # someone else's server: leave it as it was
            self._delete_objects()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # ---- identities -----------------------------------------------------------------------------------------
    def kubeconfig_for(self, who: str) -> Path:
        """kube-scheduler as `system:kube-scheduler` (bootstrap RBAC), Tessera as its ServiceAccount (the
        chart's RBAC); on a server reached by kubeconfig, that kubeconfig."""
        if self.cp is None:
            return self.admin_kubeconfig
        if who == "kube-scheduler":
            return self.cp.kubeconfig_for_user("system:kube-scheduler", name="kube-scheduler")
        return self.cp.kubeconfig_for_service_account(RELEASE_NAMESPACE, SCHEDULER_SA)

    # ---- objects --------------------------------------------------------------------------------------------
    def install_tessera(self) -> None:
        """The chart's CRDs (waited on until Established) and its namespace, PriorityClasses and RBAC."""
        # The rendered chart as the sandbox reads it: shipped with an installed package, else deploy/manifests.
        try:
            crds = manifests.crds()
            objs = [d for d in manifests.chart_objects() if d.get("kind") in _RBAC]
        except manifests.ManifestError as exc:
            raise WorldError(str(exc)) from None
        self._apply(crds)
        ext = client.ApiextensionsV1Api(self.api)
        for crd in crds:
            name = crd["metadata"]["name"]
            deadline = time.monotonic() + 60
            while not _established(_json(ext.read_custom_resource_definition(name, _preload_content=False))):
                if time.monotonic() > deadline:
                    raise WorldError(f"CRD {name} not Established after 60 s")
                time.sleep(0.2)
        self._apply(objs)

    def _apply(self, docs: list[dict[str, Any]]) -> None:
        """Server-side apply through kubectl (the folder of the control-plane binaries has it)."""
        kubectl = (
            self.cp.assets / "kubectl"
            if self.cp is not None
            else Path(assets.require(("kubectl",))) / "kubectl"
        )
        proc = subprocess.run(
            [str(kubectl), f"--kubeconfig={self.admin_kubeconfig}", "apply", "--server-side", "-f", "-"],
            input=yaml.safe_dump_all(docs), capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if proc.returncode != 0:
            raise WorldError(f"kubectl apply failed: {proc.stderr.strip().splitlines()[-1:]}")

    def create_namespace(self) -> None:
        """A fresh namespace for the next run (`namespace`)."""
        self.namespace = f"bench-{uuid.uuid4().hex[:8]}"
        self.namespaces.append(self.namespace)
        body: Any = {"metadata": {"name": self.namespace}}
        self.core.create_namespace(body)
        # Pods need the namespace's `default` ServiceAccount where the ServiceAccount admission plugin is on
        # (a server the user gave). It is written here, as the controller-manager would: waiting for it
        # cost 30 s a run on a server without one (scheduler_perf's, this benchmark's own).
        try:
            account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default"))
            self.core.create_namespaced_service_account(self.namespace, account)
        except ApiException as exc:
            if exc.status != 409:  # 409: the controller-manager was first
                raise WorldError(f"ServiceAccount default in {self.namespace}: {exc.reason}") from None

    def create_nodes(self, *, slices: bool) -> None:
        """The GPU nodes, in parallel (creation, then the status a kubelet would write). `slices`: Tessera's
        device plugin runs there (it registers the slice resource)."""
        core = self.core
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda name: self._node(core, name, slices), self.node_names))

    def _node(self, core: client.CoreV1Api, name: str, slices: bool) -> None:
        gpus = self.cfg.gpus_per_node
        capacity = {
            "cpu": str(12 * gpus),
            "memory": f"{96 * gpus}Gi",
            "pods": "110",
            "nvidia.com/gpu": str(gpus),
        }
        if slices:
            capacity[GPU_SLICE_RESOURCE] = str(gpus * MILLI_PER_GPU)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        model = GPU_MODEL
        labels = {"kubernetes.io/hostname": name}
        if self.cfg.affinity:  # three zones, two GPU models (the affinity workload, load.py)
            index = int(name.rsplit("-", 1)[1])  # bench-<run>-<index>

            labels["topology.kubernetes.io/zone"] = f"zone-{index % 3}"
            model = AFFINITY_MODELS[index % 2]
        labels.update({GPU_PRODUCT_LABEL: model[0], GPU_MEMORY_LABEL: str(model[1])})
        status = {"capacity": capacity, "allocatable": dict(capacity),
                  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                  "lastHeartbeatTime": now, "lastTransitionTime": now}]}  # fmt: skip
        body: Any = {"metadata": {"name": name, "labels": labels}}
        _json(core.create_node(body, _preload_content=False))
        _json(core.patch_node_status(name, {"status": status}, _preload_content=False))

    def node_objects(self) -> list[dict[str, Any]]:
        """The benchmark's Node objects as the API server has them."""
        names = set(self.node_names)
        items = _json(self.core.list_node(_preload_content=False)).get("items") or []
        return [n for n in items if n["metadata"]["name"] in names]

    def namespace_objects(self) -> list[dict[str, Any]]:
        """The current run's Namespace object."""
        return (
            [_json(self.core.read_namespace(self.namespace, _preload_content=False))]
            if self.namespace
            else []
        )

    def delete_pods(self, timeout_s: float = 120.0) -> None:
        """Remove the current run's pods at once (no kubelet would confirm a graceful deletion), so the next
        run finds the nodes empty."""
        if self.api is None or not self.namespace:
            return
        core = self.core
        with contextlib.suppress(ApiException):
            core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            left = _json(core.list_namespaced_pod(self.namespace, limit=1, _preload_content=False))
            if not left.get("items"):
                return
            time.sleep(0.5)

    def _delete_objects(self) -> None:
        if self.api is None:
            return
        core = self.core
        for name in self.node_names:
            with contextlib.suppress(ApiException):
                _json(core.delete_node(name, _preload_content=False))
        for ns in self.namespaces:
            with contextlib.suppress(ApiException):
                core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
                core.delete_namespace(ns)


def _established(crd: dict[str, Any]) -> bool:
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])  # fmt: skip


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
