"""`--kai-compat` on the real API server: KAI Scheduler's Queue and PodGroup kinds (minimal structural CRDs
in KAI's shape, scheduler/sandbox/kai_crds.yaml) read by the scheduler running as its ServiceAccount with the chart's
RBAC for `kaiCompat.enabled=true`. A KAI user's manifests, applied with kubectl as they are (schedulerName
kai-scheduler, the kai.scheduler/queue label, pod-group-name), are scheduled; status is written back in
KAI's shape; a Tessera object of the same name wins, with a Warning event on the KAI one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.cycle import SchedulerConfig
from scheduler.kube.kai_compat import access_problem
from scheduler.kube.runner import RunnerConfig, SchedulerRunner
from scheduler.sandbox.controlplane import ControlPlane
from scheduler.sandbox.manifests import KAI_CRDS as KAI_CRDS_FILE
from tests.controlplane.install import TesseraInstall
from tests.deploy.deploy_support import needs_helm, render_chart

KAI_CRDS = KAI_CRDS_FILE  # KAI's CRDs in KAI's shape, as `tessera sandbox up --kai-compat` installs them
KAI, TESSERA = "scheduling.run.ai", "scheduling.tessera.dev"

Obj = dict[str, Any]


def wait_until(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not met within {timeout}s: {getattr(predicate, '__name__', predicate)}")
        time.sleep(interval)


# ---- the chart's values, rendered (no API server) ----------------------------------------------------------
def test_chart_grants_kai_kinds_and_passes_the_flag_only_when_enabled() -> None:
    needs_helm()
    for enabled in (False, True):
        objects = render_chart.render({"kaiCompat": {"enabled": enabled}})
        (role,) = [
            o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-scheduler")
        ]
        kai_rules = [r for r in role["rules"] if KAI in r["apiGroups"]]
        (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        if not enabled:
            assert kai_rules == [] and "--kai-compat" not in args
            continue
        granted = {(res, verb) for r in kai_rules for res in r["resources"] for verb in r["verbs"]}
        assert {(res, v) for res in ("queues", "podgroups") for v in ("get", "list", "watch")} <= granted
        assert {(res, "patch") for res in ("queues/status", "podgroups/status")} <= granted
        assert not {v for r in kai_rules for v in r["verbs"]} & {"create", "delete", "deletecollection"}
        assert "--kai-compat" in args
    assert not [o for o in render_chart.crds() if o["spec"]["group"] == KAI]  # KAI's CRDs are KAI's


# ---- the real API server -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kai_kubectl(
    control_plane: ControlPlane, tessera: TesseraInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Any]]:
    """kubectl with Tessera's CRDs (the session's install) and the KAI-shaped ones the sandbox ships, which are
    removed afterwards. While both exist, kubectl resolves `queues` and `podgroups` to KAI's kinds: this
    kubectl keeps its discovery cache apart, so the other tests' kubectl never learns of them."""
    cache = tmp_path_factory.mktemp("kubectl-cache")

    def kubectl(*args: str, **kw: Any) -> Any:
        return control_plane.kubectl(f"--cache-dir={cache}", *args, **kw)

    kubectl("apply", "--server-side", "-f", str(KAI_CRDS))
    control_plane.wait_established(KAI_CRDS)
    try:
        yield kubectl
    finally:
        kubectl("delete", "--wait=true", "--timeout=60s", "-f", str(KAI_CRDS), check=False)


class World:
    """One test's objects: applied as the admin (the KAI user and the operator), removed at the end."""

    def __init__(self, cp: ControlPlane, namespace: str, kubectl: Callable[..., Any]) -> None:
        self.cp, self.ns, self.kubectl = cp, namespace, kubectl
        self.admin = cp.client()
        self.core, self.custom = client.CoreV1Api(self.admin), client.CustomObjectsApi(self.admin)
        self.suffix = uuid.uuid4().hex[:6]
        self._cleanup: list[Callable[[], Any]] = []
        self._nodes: list[str] = []
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name="kai-test-heartbeat", daemon=True)
        self._heartbeat.start()

    def _beat(self) -> None:
        """Play the kubelets' heartbeat: a node that reports nothing is tainted unreachable after ~40 s."""
        while not self._stop.wait(5):
            for name in list(self._nodes):
                with contextlib.suppress(ApiException):
                    self.core.patch_node_status(name, {"status": {"conditions": [_ready()]}})

    def apply(self, manifest: str) -> None:
        """What the user types: kubectl apply of YAML."""
        self.kubectl("apply", "-n", self.ns, "-f", "-", input=manifest)
        for doc in yaml.safe_load_all(manifest):
            if doc and doc["kind"] == "Queue":
                group, version = doc["apiVersion"].split("/")
                name = doc["metadata"]["name"]
                self._cleanup.append(
                    lambda g=group, v=version, n=name: self.custom.delete_cluster_custom_object(
                        g, v, "queues", n
                    )
                )

    def scheduler_identity(self, *, kai_compat: bool) -> Path:
        """The chart's ServiceAccount, ClusterRole and binding for the scheduler, as a kubeconfig."""
        needs_helm()
        release = f"k{self.suffix}{int(kai_compat)}"
        objects = render_chart.render(
            {"kaiCompat": {"enabled": kai_compat}}, release=release, namespace=self.ns
        )
        name = f"{release}-tessera-scheduler"
        mine = [o for o in objects if o["metadata"]["name"] == name
                and o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]  # fmt: skip
        assert len(mine) == 3
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(mine))
        rbac = client.RbacAuthorizationV1Api(self.admin)
        self._cleanup.append(lambda: rbac.delete_cluster_role_binding(name))
        self._cleanup.append(lambda: rbac.delete_cluster_role(name))
        kubeconfig = self.cp.kubeconfig_for_service_account(self.ns, name)
        if kai_compat:  # RBAC is read from a watch cache: allow it a moment
            custom = client.CustomObjectsApi(self.cp.client(kubeconfig))
            wait_until(lambda: access_problem(custom) is None, timeout=20)
        return kubeconfig

    def node(self, name: str, gpus: int) -> str:
        full = f"{name}-{self.suffix}"
        labels = {
            "kai-test": self.suffix,
            "nvidia.com/gpu.product": "NVIDIA-L4",
            "nvidia.com/gpu.memory": "23034",
        }
        self.core.create_node({"metadata": {"name": full, "labels": labels}})
        self._cleanup.append(lambda: self.core.delete_node(full))
        capacity = {"nvidia.com/gpu": str(gpus), "cpu": "16", "memory": "64Gi", "pods": "110"}
        status = {"capacity": capacity, "allocatable": capacity, "conditions": [_ready()]}
        self.core.patch_node_status(full, {"status": status})
        self._nodes.append(full)
        return full

    def kai_pod(self, name: str, queue: str, *, group: str | None = None) -> str:
        """A pod as a KAI user writes it (one GPU), kept on this test's nodes by a node selector."""
        annotations = f"\n  annotations:\n    pod-group-name: {group}" if group else ""
        return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels:
    kai.scheduler/queue: {queue}{annotations}
spec:
  schedulerName: kai-scheduler
  nodeSelector:
    kai-test: "{self.suffix}"
  containers:
  - name: main
    image: ubuntu
    args: ["sleep", "infinity"]
    resources:
      limits:
        nvidia.com/gpu: "1"
---"""

    def node_of(self, pod: str) -> str | None:
        return self.core.read_namespaced_pod(pod, self.ns).spec.node_name

    def kai_queue(self, name: str) -> Obj:
        return dict(self.custom.get_cluster_custom_object(KAI, "v2", "queues", name))

    def kai_group(self, name: str) -> Obj:
        return dict(self.custom.get_namespaced_custom_object(KAI, "v2alpha2", self.ns, "podgroups", name))

    def events(self, kind: str, name: str, namespace: str) -> list[Any]:
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        return list(self.core.list_namespaced_event(namespace, field_selector=selector).items)

    def close(self) -> None:
        self._stop.set()
        self._heartbeat.join(timeout=10)
        with contextlib.suppress(ApiException):  # bound pods have no kubelet to confirm a graceful delete
            self.core.delete_collection_namespaced_pod(self.ns, grace_period_seconds=0)
        for undo in reversed(self._cleanup):
            with contextlib.suppress(ApiException):
                undo()


def _ready() -> Obj:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now,
            "lastTransitionTime": now}  # fmt: skip


@pytest.fixture
def world(control_plane: ControlPlane, namespace: str, kai_kubectl: Callable[..., Any]) -> Iterator[World]:
    w = World(control_plane, namespace, kai_kubectl)
    try:
        yield w
    finally:
        w.close()


def kai_queue_yaml(name: str, gpu_quota: float, *, parent: str | None = None) -> str:
    parent_line = f"\n  parentQueue: {parent}" if parent else ""
    return f"""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: {name}
spec:{parent_line}
  resources:
    gpu: {{quota: {gpu_quota}, overQuotaWeight: 1, limit: -1}}
    cpu: {{quota: -1, overQuotaWeight: 1, limit: -1}}
    memory: {{quota: -1, overQuotaWeight: 1, limit: -1}}
---"""


def runner(kubeconfig: Path, cp: ControlPlane) -> SchedulerRunner:
    config = RunnerConfig(
        identity="kai-compat-test", scheduler_name="kai-scheduler", cycle_interval_s=0.1, leader_elect=False,
        kai_compat=True, sync_timeout_s=20, watch_timeout_s=60, backoff_initial_s=0.05,
        scheduler=SchedulerConfig(expected_nodes=4, max_gpus_per_node=8),
    )  # fmt: skip
    return SchedulerRunner(cp.client(kubeconfig), config)


@pytest.mark.apiserver
def test_scheduler_process_schedules_a_kai_users_pod(world: World, tmp_path: Path) -> None:
    """`tessera-scheduler --kai-compat --scheduler-name kai-scheduler`, as the chart runs it: a pod labelled
    kai.scheduler/queue against a KAI Queue is bound, and the Queue's status says what it holds."""
    team = f"team-a-{world.suffix}"
    world.apply(
        kai_queue_yaml(f"org-{world.suffix}", 4) + kai_queue_yaml(team, 2, parent=f"org-{world.suffix}")
    )
    node = world.node("kai-n1", gpus=1)
    kubeconfig = world.scheduler_identity(kai_compat=True)
    env = {**os.environ, "TESSERA_LOG_LEVEL": "WARNING"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    argv = [sys.executable, "-m", "scheduler.kube.main", "--kubeconfig", str(kubeconfig), "--kai-compat",
            "--scheduler-name=kai-scheduler", "--listen=", "--cycle-period=100ms", "--log-level=warning"]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        world.apply(world.kai_pod("solo", team))
        wait_until(lambda: world.node_of("solo") == node or proc.poll() is not None)
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        wait_until(
            lambda: (
                (world.kai_queue(team).get("status") or {}).get("allocated", {}).get("nvidia.com/gpu") == "1"
            )
        )
        parent = world.kai_queue(f"org-{world.suffix}")["status"]
        assert parent["childQueues"] == [team] and parent["allocated"]["nvidia.com/gpu"] == "1"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.apiserver
def test_without_the_charts_kai_rbac_the_scheduler_says_so_and_exits(world: World) -> None:
    kubeconfig = world.scheduler_identity(kai_compat=False)
    env = {**os.environ, "TESSERA_LOG_LEVEL": "WARNING"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    done = subprocess.run([sys.executable, "-m", "scheduler.kube.main", "--kubeconfig", str(kubeconfig),
                           "--kai-compat", "--listen="], env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --kai-compat: not allowed to list queues.scheduling.run.ai: the chart grants it with "
        "kaiCompat.enabled=true"
    ]


@pytest.mark.apiserver
def test_a_kai_podgroup_is_a_gang_with_kais_status(world: World, control_plane: ControlPlane) -> None:
    """Two workers of a KAI PodGroup (minMember 2) and two 1-GPU nodes, one of them taken by a pod of
    another scheduler: nobody starts, the PodGroup says why in KAI's shape; the GPU is freed, both start."""
    team = f"team-g-{world.suffix}"
    world.apply(kai_queue_yaml(team, 3))
    first, second = world.node("kai-g1", gpus=1), world.node("kai-g2", gpus=1)
    blocker = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "blocker"},
               "spec": {"nodeName": first, "containers": [{"name": "main", "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip
    world.core.create_namespaced_pod(world.ns, blocker)
    sched = runner(world.scheduler_identity(kai_compat=True), control_plane).start()
    try:
        world.apply(f"""
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: ddp
spec:
  minMember: 2
  queue: {team}
---""")
        # Pods naming a PodGroup the scheduler has not seen yet are a gang of those present (docs/kai-compat.md):
        # the workers come once it has the group, so the test is about minMember, not about watch order.
        wait_until(lambda: f"{world.ns}/ddp" in sched.scheduler.cache.podgroups)
        world.apply(world.kai_pod("ddp-0", team, group="ddp") + world.kai_pod("ddp-1", team, group="ddp"))

        def waiting() -> list[Obj]:
            return list((world.kai_group("ddp").get("status") or {}).get("schedulingConditions") or [])

        def gang_waiting() -> list[Obj]:
            found = waiting()
            return found if found and found[0]["reasons"][0]["reason"] == "GangUnschedulable" else []

        (condition,) = wait_until(gang_waiting)
        assert (condition["type"], condition["nodePool"], condition["reason"], condition["status"]) == (
            "UnschedulableOnNodePool", "default", "Unschedulable", "True")  # fmt: skip
        assert "gang" in condition["message"] and condition["lastTransitionTime"]
        assert int(condition["transitionID"]) >= 1
        assert (world.node_of("ddp-0"), world.node_of("ddp-1")) == (None, None)  # 2 needed, 1 free: nobody
        world.core.delete_namespaced_pod("blocker", world.ns, grace_period_seconds=0)
        wait_until(lambda: {world.node_of("ddp-0"), world.node_of("ddp-1")} == {first, second})
        wait_until(lambda: not waiting())  # KAI removes the condition once the gang is scheduled
        wait_until(
            lambda: (
                (world.kai_queue(team).get("status") or {}).get("allocated", {}).get("nvidia.com/gpu") == "2"
            )
        )
    finally:
        sched.stop()


@pytest.mark.apiserver
def test_tessera_object_of_the_same_name_wins_and_the_kai_one_is_told(
    world: World, control_plane: ControlPlane
) -> None:
    team = f"team-c-{world.suffix}"
    world.apply(kai_queue_yaml(team, 1))
    world.apply(f"""
apiVersion: scheduling.tessera.dev/v1alpha1
kind: Queue
metadata:
  name: {team}
spec:
  resources:
    gpu: {{quota: 0, limit: 0}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: broken-{world.suffix}
spec:
  resources:
    gpu: {{quota: -2, limit: -1, overQuotaWeight: 1}}
---""")
    world.apply(kai_queue_yaml(f"orphan-{world.suffix}", 1, parent="nowhere"))
    node = world.node("kai-c1", gpus=1)
    sched = runner(world.scheduler_identity(kai_compat=True), control_plane).start()
    try:
        world.apply(world.kai_pod("capped", team))

        def refused() -> str:
            conditions = world.core.read_namespaced_pod("capped", world.ns).status.conditions or []
            return next(
                (c.message for c in conditions if c.type == "PodScheduled" and c.status == "False"), ""
            )

        assert "limit" in wait_until(refused)  # Tessera's Queue (GPU limit 0) is the one in force
        assert world.node_of("capped") is None

        def kai_warning(name: str, reason: str) -> Any:
            return next((e for e in world.events("Queue", name, "default")
                         if e.reason == reason and e.involved_object.api_version == "scheduling.run.ai/v2"), None)  # fmt: skip

        shadowed = wait_until(lambda: kai_warning(team, "KaiObjectShadowed"))
        assert shadowed.type == "Warning" and "Tessera's Queue" in shadowed.message
        broken = wait_until(lambda: kai_warning(f"broken-{world.suffix}", "KaiObjectInvalid"))
        assert "spec.resources.gpu.quota" in broken.message and "-1 (unlimited) or >= 0" in broken.message
        orphaned = wait_until(lambda: kai_warning(f"orphan-{world.suffix}", "QueueMisconfigured"))
        assert (
            "parent queue nowhere does not exist" in orphaned.message
        )  # the cycle's warning, on KAI's object
        lookup = sched.cluster.kai.queue_lookup() if sched.cluster.kai else None  # what the webhook asks
        assert lookup is not None
        assert (lookup(team), lookup(f"orphan-{world.suffix}"), lookup("no-such-queue")) == (
            "leaf",
            "leaf",
            None,
        )
        assert (
            lookup(f"broken-{world.suffix}") == "leaf"
        )  # it exists; the scheduler says why it cannot use it
        world.custom.delete_cluster_custom_object(TESSERA, "v1alpha1", "queues", team)
        wait_until(lambda: world.node_of("capped") == node)  # the KAI Queue (quota 1) takes over the name
    finally:
        sched.stop()


def test_status_bodies_are_json() -> None:
    """What the writers send is plain JSON (no pydantic objects, no NaN)."""
    from scheduler.api.kai import kai_podgroup_status, kai_queue_status
    from scheduler.api.meta import Condition
    from scheduler.api.podgroup import PodGroupStatus
    from scheduler.api.queue import QueueStatus

    q = kai_queue_status(QueueStatus.from_internal({"gpu": 1.0}, {"gpu": 2.0}, {"gpu": 1.0}), ["a"])
    g = kai_podgroup_status(
        PodGroupStatus(phase="Unschedulable", conditions=[Condition(type="S", status="False", reason="R")]),
        None,
        "2026-01-01T00:00:00Z",
    )
    assert json.loads(json.dumps({"q": q, "g": g}, allow_nan=False)) == {"q": q, "g": g}


# ---- the same-name rule, whatever the order of events -------------------------------------------------------
class _Cache:
    """An informer's cache as the adapter reads it (get, snapshot); the informer thread is the test."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}

    def get(self, key: str) -> Obj | None:
        return self.objects.get(key)

    def snapshot(self) -> list[Obj]:
        return list(self.objects.values())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["tessera+", "tessera-", "kai+", "kai!", "kai-", "drain"]), max_size=14))
def test_after_each_drain_the_cycle_holds_tesseras_object_else_kais(ops: list[str]) -> None:
    """Informer caches change at once, their events are drained later (as in the adapter). After every
    drain the cycle holds Tessera's Queue if it exists; else the KAI one's translation if it is usable,
    never a stale Tessera object; else nothing."""
    from scheduler.cache.cluster import WatchEvent
    from scheduler.kube.event_queue import ResourceEvent
    from scheduler.kube.kai_compat import KaiCompat

    caches = {"Queue": _Cache(), "KaiQueue": _Cache(), "PodGroup": _Cache(), "KaiPodGroup": _Cache()}
    kai = KaiCompat(None, None)  # type: ignore[arg-type]  # no API calls: neither status nor events are written
    kai.attach(caches)  # type: ignore[arg-type]
    queued: list[ResourceEvent] = []
    seen: dict[str, Obj] = {}  # the cycle's Queues, as the cache applies the drained events

    def change(kind: str, obj: Obj | None) -> None:
        old = caches[kind].objects.get("q")
        if obj is None:
            if old is not None:
                del caches[kind].objects["q"]
                queued.append(ResourceEvent(kind, "DELETED", old))
        else:
            caches[kind].objects["q"] = obj
            queued.append(ResourceEvent(kind, "MODIFIED" if old else "ADDED", obj))

    def drain() -> None:
        out: list[WatchEvent] = []
        for ev in queued:  # as WatchTranslator._translate dispatches them
            if ev.kind == "Queue":
                out.append(WatchEvent("Queue", ev.type, ev.obj))
                kai.after_native(ev, out)
            else:
                kai.translate(ev, out)
        queued.clear()
        for w in out:
            if w.type == "DELETED":
                seen.pop("q", None)
            else:
                seen["q"] = dict(w.obj)

    for version, op in enumerate([*ops, "drain"], start=1):
        meta = {"name": "q", "resourceVersion": str(version)}
        if op == "tessera+":
            change("Queue", {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "Queue", "metadata": meta,
                             "spec": {"priority": version}})  # fmt: skip
        elif op in ("kai+", "kai!"):  # created or changed; kai! is a version Tessera cannot use
            gpu = {"quota": -5 if op == "kai!" else version, "limit": -1}
            change("KaiQueue", {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": meta,
                                "spec": {"resources": {"gpu": gpu}}})  # fmt: skip
        elif op in ("tessera-", "kai-"):
            change("Queue" if op == "tessera-" else "KaiQueue", None)
        if op != "drain":
            continue
        drain()
        native, theirs, held = caches["Queue"].get("q"), caches["KaiQueue"].get("q"), seen.get("q")
        translated = held is not None and "tessera.dev/translated-from" in held["metadata"].get(
            "annotations", {}
        )
        if native is not None:
            assert held == native
        elif theirs is None:
            assert held is None
        elif theirs["spec"]["resources"]["gpu"]["quota"] >= 0:
            assert translated and held["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
        else:
            assert held is None or translated  # an unusable KAI version: the cycle keeps what it had of KAI's
