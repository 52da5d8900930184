"""A running `tessera sandbox`, as the tests (and a user with kubectl) see it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, GROUP, VERSION
from scheduler.sandbox.processes import ProcessRecord, ProcessTable, alive
from scheduler.sandbox.readiness import log_tail
from scheduler.sandbox.real_kubelet import NodeDir
from scheduler.sandbox.sandbox import Sandbox, SandboxState

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 30.0, interval_s: float = 0.2) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last: {last!r})")
        time.sleep(interval_s)


@dataclass
class SandboxEnv:
    state: SandboxState
    kubectl_bin: Path
    box: Sandbox | None = None  # the in-process sandbox (real kubelets): restarts its processes

    def __post_init__(self) -> None:
        # kubectl's discovery cache, the sandbox's own (dropped by a test that removes an API group).
        self.cache_dir = Path(self.state.data_dir) / "kubectl-cache"
        self.api = config.new_client_from_config(config_file=self.state.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    # ---- kubectl, as a user types it --------------------------------------------------------------------
    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, kubeconfig: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        config = f"--kubeconfig={kubeconfig or self.state.kubeconfig}"
        cmd = [str(self.kubectl_bin), config, f"--cache-dir={self.cache_dir}", *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}"
            )
        return proc

    def apply(self, namespace: str, *docs: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(list(docs)))

    @contextmanager
    def namespace(self) -> Iterator[str]:
        """A fresh namespace; its pods are force-deleted afterwards so the next test finds the GPUs free."""
        name = f"t-{uuid.uuid4().hex[:8]}"
        self.kubectl("create", "namespace", name)
        wait_for(f"ServiceAccount default in {name}", lambda: self._has_default_sa(name))
        try:
            yield name
        finally:
            self.check_alive()
            # Controllers first (a ReplicaSet would replace the pods deleted), then their pods, at once.
            self.kubectl("delete", "deployments,replicasets,statefulsets,jobs,pods", "--all", "-n", name,
                         "--grace-period=0", "--force", check=False)  # fmt: skip
            wait_for(f"pods of {name} gone", lambda: not self.core.list_namespaced_pod(name).items, 60)
            self.kubectl("delete", "namespace", name, "--wait=false", check=False)

    def wait_established(self, crd_files: Path) -> None:
        """Every CRD in the folder Established (polled: `kubectl wait` fails at once on a CRD created a
        moment ago, while its status has no conditions yet)."""
        names = [
            d["metadata"]["name"]
            for f in sorted(crd_files.glob("*.yaml"))
            for d in yaml.safe_load_all(f.read_text())
            if d
        ]
        api = client.ApiextensionsV1Api(self.api)

        def established() -> bool:
            return all(
                any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))
                for crd in (api.read_custom_resource_definition(n) for n in names)
            )

        wait_for(f"CRDs {names} Established", established)

    def forget_discovery(self) -> None:
        """Drop kubectl's cached discovery (after an API group went away, or `queues` still means it)."""
        shutil.rmtree(self.cache_dir, ignore_errors=True)

    def _has_default_sa(self, namespace: str) -> bool:
        return bool(
            self.core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items
        )

    # ---- what the parts wrote ---------------------------------------------------------------------------
    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            self.kubectl("get", "pod", name, "-n", namespace, "-o", "json").stdout
        )
        return data

    def phase(self, namespace: str, name: str) -> str:
        return str(self.pod(namespace, name).get("status", {}).get("phase"))

    def running(self, namespace: str, name: str, timeout_s: float = 30.0) -> dict[str, Any]:
        try:
            return wait_for(
                f"pod {namespace}/{name} Running", lambda: self._if_running(namespace, name), timeout_s
            )
        except AssertionError as exc:
            status = self.pod(namespace, name).get("status", {})
            conditions = [
                (c["type"], c["status"], c.get("reason"), c.get("message"))
                for c in status.get("conditions") or []
            ]
            raise AssertionError(f"{exc}; phase {status.get('phase')}, conditions {conditions}") from None

    def _if_running(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod = self.pod(namespace, name)
        status = pod.get("status", {})
        if status.get("phase") == "Failed":
            raise AssertionError(
                f"pod {namespace}/{name} Failed: {status.get('reason')}: {status.get('message')}"
            )
        return pod if status.get("phase") == "Running" else None

    def assignment(self, pod: dict[str, Any]) -> GPUAssignment:
        return GPUAssignment.from_annotation(pod["metadata"]["annotations"][GPU_ASSIGNMENT])

    def container_record(self, namespace: str, pod: str, container: str = "main") -> dict[str, Any]:
        """What the container was given. Real kubelet: fakecri's record of its last CreateContainer (`envs`,
        `mounts`, `devices`, `cdiDevices`, `annotations`: the device plugins' Allocate answers as the
        kubelet passed them on). Stand-in: what Allocate answered it (`allocations`)."""
        created = self.created_containers(namespace, pod, container)
        if created:
            return created[-1]
        for node in self.state.nodes:
            path = Path(node.containers_dir) / f"{namespace}_{pod}_{container}.json"
            if path.exists():
                record: dict[str, Any] = json.loads(path.read_text())
                return record
        raise AssertionError(f"no container record for {namespace}/{pod}/{container}")

    def created_containers(
        self, namespace: str, pod: str, container: str | None = None
    ) -> list[dict[str, Any]]:
        """Every CreateContainer a real kubelet made for the pod (or one container of it), oldest first."""
        out: list[dict[str, Any]] = []
        for node in self.state.nodes:
            path = NodeDir(Path(node.node_dir)).record if node.node_dir else None
            if path is None or not path.exists():
                continue
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                if (
                    rec["namespace"] == namespace
                    and rec["pod"] == pod
                    and container in (None, rec["container"])
                ):
                    out.append(rec)
        return out

    def kubelet_devices(self, namespace: str, pod: str) -> dict[str, dict[str, list[str]]]:
        """Per container, per resource, the device IDs a real kubelet's device manager gave the pod (from
        its checkpoint, `kubelet_internal_checkpoint`); {} when it holds none for it."""
        obj = self.pod(namespace, pod)
        uid, node = obj["metadata"]["uid"], obj["spec"].get("nodeName")
        info = next((n for n in self.state.nodes if n.name == node), None)
        if info is None or not info.node_dir:
            return {}
        checkpoint = NodeDir(Path(info.node_dir)).checkpoint
        data = json.loads(checkpoint.read_text())["Data"]
        out: dict[str, dict[str, list[str]]] = {}
        for entry in data.get("PodDeviceEntries") or []:
            if entry["PodUID"] == uid:
                ids = [d for per_numa in entry["DeviceIDs"].values() for d in per_numa]
                out.setdefault(entry["ContainerName"], {})[entry["ResourceName"]] = sorted(ids)
        return out

    # ---- the sandbox's processes ------------------------------------------------------------------------
    def check_alive(self) -> None:
        """Fail naming any process of the sandbox that exited (a crashed kubelet...), with its log's end."""
        table = ProcessTable(Path(self.state.data_dir))
        dead = [r for r in table.records() if not alive(r)]
        if dead:
            tails = "\n".join(f"--- {r.name} ({r.log}):\n{log_tail(r.log, 25)}" for r in dead)
            raise AssertionError(f"sandbox processes exited: {[r.name for r in dead]}\n{tails}")

    def restart(self, process: str) -> ProcessRecord:
        """Restart `kubelet/<node>`, `device-plugin/<node>`, `fakecri/<node>`... as a node would (the new
        process dies with the test session too)."""
        assert self.box is not None, "only an in-process sandbox restarts its processes"
        return self.box.restart(process)

    def process(self, name: str) -> ProcessRecord:
        rec = ProcessTable(Path(self.state.data_dir)).get(name)
        assert rec is not None, name
        return rec

    def plugin_registrations(self, node: str) -> int:
        """How many times the node's device plugin has registered a resource with the kubelet (its log)."""
        log = Path(self.process(f"device-plugin/{node}").log).read_text(errors="replace")
        return log.count("registered with the kubelet at")

    def wait_plugin_registered(self, node: str, before: int, resources: int = 2) -> None:
        """Wait until the plugin registered its `resources` again since `plugin_registrations` said `before`:
        a pod the kubelet admits earlier finds no healthy device ("Allocate failed due to no healthy devices
        present"), as on a real node."""
        wait_for(
            f"device plugin of {node} registered again",
            lambda: self.plugin_registrations(node) >= before + resources,
            60,
        )

    def node_ready(self, node: str, gpus: int, timeout_s: float = 60.0) -> dict[str, Any]:
        """Wait until the Node is Ready with `gpus` whole GPUs and their slices allocatable."""

        def ready() -> dict[str, Any] | None:
            obj: dict[str, Any] = json.loads(self.kubectl("get", "node", node, "-o", "json").stdout)
            status = obj.get("status") or {}
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            alloc = status.get("allocatable") or {}
            ok = conditions.get("Ready") == "True" and alloc.get("nvidia.com/gpu") == str(gpus)
            return (
                obj if ok and alloc.get("tessera.dev/gpu-slice") in (f"{gpus}k", str(gpus * 1000)) else None
            )

        return wait_for(f"node {node} Ready with {gpus} GPUs allocatable", ready, timeout_s)

    def report(self, node: str) -> dict[str, Any]:
        data: dict[str, Any] = self.custom.get_cluster_custom_object(GROUP, VERSION, "gpunodereports", node)
        return data

    def reported_uuids(self, node: str) -> list[str]:
        return [g["uuid"] for g in self.report(node)["spec"]["gpus"]]

    def assigned_milli(self, node: str) -> dict[str, int]:
        """Per GPU UUID, the share of it the node agent reports as assigned."""
        return {g["uuid"]: int(g.get("assignedMilli", 0)) for g in self.report(node)["spec"]["gpus"]}

    def queue_status(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = self.custom.get_cluster_custom_object(GROUP, VERSION, "queues", name)
        return dict(data.get("status") or {})

    def scheduler_metrics(self) -> str:
        with urllib.request.urlopen(f"{self.state.scheduler_url}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def gpu_allocated_fraction(self) -> dict[tuple[str, str], float]:
        """The scheduler's `tessera_gpu_allocated_fraction` per (node, GPU index)."""
        out: dict[tuple[str, str], float] = {}
        for line in self.scheduler_metrics().splitlines():
            if line.startswith("tessera_gpu_allocated_fraction{"):
                labels, value = line[len("tessera_gpu_allocated_fraction{") :].split("} ")
                parts = dict(p.split("=", 1) for p in labels.split(","))
                out[(parts["node"].strip('"'), parts["gpu"].strip('"'))] = float(value)
        return out


def pod(
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    gpus: int = 0,
    grace_s: int = 1,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod for Tessera, as a user writes it (the webhook adds the device-plugin limit for fractions)."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "schedulerName": "tessera",
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace_s,
        "containers": [
            {"name": "main", "image": "busybox", "command": ["sleep", "3600"], "resources": resources}
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": spec,
    }
