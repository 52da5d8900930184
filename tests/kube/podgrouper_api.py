"""Playing the workload controllers against the real API server: objects from `workloads.py` created, their
status moved and deleted through the API (as the admin: the test plays every controller that is not
Kubernetes' own; Kubernetes' own, the Job, ReplicaSet, StatefulSet and garbage collectors, really run)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.keys import GROUP, VERSION
from scheduler.kube.podgrouper.kinds import lookup
from scheduler.kube.podgrouper.names import group_name
from scheduler.sandbox.controlplane import ControlPlane

Obj = dict[str, Any]
CRDS = Path(__file__).resolve().parent / "crds"
RUNNING = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def install_crds(cp: ControlPlane) -> None:
    """The workload kinds' CRDs (ours, minimal: tests/kube/crds/), applied once and Established."""
    done = cp.kubectl("apply", "--server-side", "-f", str(CRDS), check=False)
    assert done.returncode == 0, f"kubectl apply: {done.stderr.strip()}"
    cp.wait_established(CRDS)


BUILTIN_VERSIONS = {"": "v1", "apps": "apps/v1", "batch": "batch/v1"}


def api_version_of(group: str, kind: str) -> str:
    """The apiVersion a workload controller writes for a kind (built-in, or the CRD's storage version)."""
    if group in BUILTIN_VERSIONS:
        return BUILTIN_VERSIONS[group]
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if crd and crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == kind:
                return f"{group}/{crd['spec']['versions'][0]['name']}"
    raise KeyError(f"{kind}.{group}: no CRD in {CRDS}")


def _json(resp: Any) -> Any:
    try:
        return json.loads(resp.data)
    finally:
        resp.release_conn()


def _gvp(o: Mapping[str, Any]) -> tuple[str, str, str]:
    api_version, kind = str(o["apiVersion"]), str(o["kind"])
    group, version = api_version.split("/", 1) if "/" in api_version else ("", api_version)
    known = lookup(group, kind)
    assert known is not None, f"{kind}: not a kind the podgrouper knows"
    return group, version, known.plural


class Workloads:
    def __init__(self, admin: client.ApiClient, namespace: str) -> None:
        self.ns = namespace
        self.core = client.CoreV1Api(admin)
        self.custom = client.CustomObjectsApi(admin)
        self.created: list[Obj] = []

    def create(self, body: Mapping[str, Any]) -> Obj:
        body = {**body, "metadata": {**body["metadata"], "namespace": self.ns}}
        group, version, plural = _gvp(body)
        if group == "":
            out = dict(_json(self.core.create_namespaced_pod(self.ns, body, _preload_content=False)))
        else:
            resp = self.custom.create_namespaced_custom_object(group, version, self.ns, plural, body,
                                                               _preload_content=False)  # fmt: skip
            out = dict(_json(resp))
        self.created.append(out)
        return out

    def cleanup(self) -> None:
        """Delete what the test created, and wait until Kubernetes' own controllers are gone too (a
        ReplicaSet left behind would make pods again while the test's pods are being removed)."""
        for o in reversed(self.created):
            if o["kind"] != "Pod":
                self.delete(o)
        deadline = time.monotonic() + 30
        for group, plural in (("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"),
                              ("batch", "cronjobs"), ("batch", "jobs")):  # fmt: skip
            while self.custom.list_namespaced_custom_object(group, "v1", self.ns, plural)["items"]:
                assert time.monotonic() < deadline, f"{plural} left in {self.ns}"
                time.sleep(0.1)

    def get(self, o: Mapping[str, Any]) -> Obj:
        group, version, plural = _gvp(o)
        name = o["metadata"]["name"]
        if group == "":
            return dict(_json(self.core.read_namespaced_pod(name, self.ns, _preload_content=False)))
        return dict(_json(self.custom.get_namespaced_custom_object(group, version, self.ns, plural, name,
                                                                   _preload_content=False)))  # fmt: skip

    def find(self, o: Mapping[str, Any]) -> Obj | None:
        try:
            return self.get(o)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, o: Mapping[str, Any], body: Mapping[str, Any]) -> Obj:
        group, version, plural = _gvp(o)
        resp = self.custom.patch_namespaced_custom_object(group, version, self.ns, plural, o["metadata"]["name"],
                                                          dict(body), _preload_content=False)  # fmt: skip
        return dict(_json(resp))

    def status(self, o: Mapping[str, Any], status: Mapping[str, Any]) -> Obj:
        """Write `status` as the object's controller (or, for a pod, its kubelet) would."""
        group, version, plural = _gvp(o)
        name = o["metadata"]["name"]
        if group == "":
            resp = self.core.patch_namespaced_pod_status(
                name, self.ns, {"status": dict(status)}, _preload_content=False
            )
        else:
            resp = self.custom.patch_namespaced_custom_object_status(
                group, version, self.ns, plural, name, {"status": dict(status)}, _preload_content=False
            )
        return dict(_json(resp))

    def delete(self, o: Mapping[str, Any]) -> None:
        group, version, plural = _gvp(o)
        name = o["metadata"]["name"]
        try:
            if group == "":
                self.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0)
            else:
                self.custom.delete_namespaced_custom_object(group, version, self.ns, plural, name,
                                                            propagation_policy="Background")  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:
                raise

    def pods(self, **labels: str) -> list[Obj]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items()) or None
        items = _json(self.core.list_namespaced_pod(self.ns, label_selector=selector, _preload_content=False))
        pods = [{"apiVersion": "v1", "kind": "Pod", **p} for p in items["items"]]  # list items carry neither
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    def owned_pods(self, owner: Mapping[str, Any]) -> list[Obj]:
        uid = owner["metadata"]["uid"]
        return [
            p for p in self.pods() if any(r["uid"] == uid for r in p["metadata"].get("ownerReferences") or [])
        ]

    def podgroups(self) -> dict[str, Obj]:
        items = _json(self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, "podgroups",
                                                                _preload_content=False))["items"]  # fmt: skip
        return {g["metadata"]["name"]: g for g in items}

    def group_of(self, owner: Mapping[str, Any], suffix: str = "") -> Obj | None:
        """The PodGroup derived for `owner` (by the podgrouper's name for it), if it exists."""
        return self.podgroups().get(group_name(owner["metadata"]["name"], owner["metadata"]["uid"], suffix))

    def min_member(self, owner: Mapping[str, Any], suffix: str = "") -> int | None:
        group = self.group_of(owner, suffix)
        return None if group is None else int(group["spec"]["minMember"])
