"""What `tessera sandbox up` waits for before it says the sandbox is ready, each wait bounded and watching
the process it waits on: a process that dies fails the wait at once, with the end of its log."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils.quantity import parse_quantity

from node_agent.nvml.spec import parse_gpu_spec
from scheduler.api.keys import GPU_SLICE_RESOURCE, GROUP, MILLI_PER_GPU, VERSION, WHOLE_GPU_RESOURCE
from scheduler.sandbox.controlplane import ControlPlane
from scheduler.sandbox.node import NOT_READY_TAINT
from scheduler.sandbox.processes import ProcessRecord, alive


class NotReady(RuntimeError):
    """A part of the sandbox did not come up; the message names it and ends with its log's last lines."""


def log_tail(path: str | Path, lines: int = 12) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def gpu_count(spec: str) -> int:
    return sum(model.count for model in parse_gpu_spec(spec))


class Waiter:
    def __init__(self, cp: ControlPlane, timeout_s: float) -> None:
        self.cp = cp
        self.timeout_s = timeout_s
        api = cp.client()
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)
        self.last = ""  # what the last probe saw, for the error message

    def until(self, what: str, probe: Callable[[], bool], watched: list[ProcessRecord]) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            self.cp.check_alive()
            for rec in watched:
                if not alive(rec):
                    raise NotReady(
                        f"{rec.name} exited while waiting for {what}; its log {rec.log}:\n{log_tail(rec.log)}"
                    )
            try:
                if probe():
                    return
            except (OSError, urllib.error.URLError, ApiException, ValueError, KeyError) as exc:
                self.last = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if time.monotonic() > deadline:
                seen = f" (last seen: {self.last})" if self.last else ""
                logs = "; ".join(r.log for r in watched) or str(self.cp.log_dir)
                raise NotReady(f"{what} not ready after {self.timeout_s:.0f} s{seen}; logs: {logs}")
            time.sleep(0.2)

    def http_ok(self, url: str, what: str, rec: ProcessRecord) -> None:
        import ssl

        context = ssl.create_default_context(cafile=str(self.cp.ca_file)) if url.startswith("https") else None

        def probe() -> bool:
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                return bool(resp.status == 200)

        self.until(what, probe, [rec])

    def node_registered(self, name: str, kubelet: list[ProcessRecord]) -> str:
        uid: list[str] = []

        def probe() -> bool:
            node = _data(self.core.read_node(name, _preload_content=False))
            uid.append(str(node["metadata"]["uid"]))
            return True

        self.until(f"node {name} registration", probe, kubelet)
        return uid[-1]

    def node_ready(self, name: str, gpus: str, watched: list[ProcessRecord]) -> None:
        want = gpu_count(gpus)

        def probe() -> bool:
            node = _data(self.core.read_node(name, _preload_content=False))
            status = node.get("status") or {}
            ready = any(
                c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
            )
            tainted = any(t["key"] == NOT_READY_TAINT for t in (node.get("spec") or {}).get("taints") or [])
            alloc = status.get("allocatable") or {}
            self.last = f"Ready={ready}, not-ready taint={tainted}, allocatable {alloc}"
            if not ready or tainted:
                return False
            gpus, slices = _count(alloc, WHOLE_GPU_RESOURCE), _count(alloc, GPU_SLICE_RESOURCE)
            if gpus != want or slices != want * MILLI_PER_GPU:
                return False
            report = _data(
                self.custom.get_cluster_custom_object(
                    GROUP, VERSION, "gpunodereports", name, _preload_content=False
                )
            )
            reported = len((report.get("spec") or {}).get("gpus") or [])
            self.last = f"GPUNodeReport {name} lists {reported} GPUs"
            return reported == want

        self.until(f"node {name} (Ready, {want} GPUs allocatable, its GPUNodeReport)", probe, watched)

    def scheduler_leads(self, namespace: str, lease: str, identity: str, rec: ProcessRecord) -> None:
        def probe() -> bool:
            obj = _data(self.coordination.read_namespaced_lease(lease, namespace, _preload_content=False))
            holder = (obj.get("spec") or {}).get("holderIdentity")
            self.last = f"Lease {namespace}/{lease} held by {holder}"
            return bool(holder == identity)

        self.until("the scheduler's leadership", probe, [rec])


def _count(resources: dict[str, Any], name: str) -> int:
    """A resource count as the API server writes it back ("2000" comes back as "2k")."""
    return int(parse_quantity(resources.get(name, "0")))


def _data(resp: Any) -> dict[str, Any]:
    data = json.loads(resp.data)
    assert isinstance(data, dict)
    return data
