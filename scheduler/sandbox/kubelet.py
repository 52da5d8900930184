"""The sandbox's kubelet stand-in: one per fake node, a process of its own, as `system:node:<name>`.

No container runs. Everything the API server, the scheduler and the device plugin can see of a kubelet is
done for real: the Node is registered with capacity from the device plugins' ListAndWatch (node.py), the
device-plugin Registration socket is served, `GetPreferredAllocation`/`Allocate` are called over the
plugin's gRPC socket for every container that asks for a device resource and `PreStartContainer` before the
containers start (devices.py), the PodResources API is served on `<state dir>/pod-resources/kubelet.sock`
(podresources.py), and pod status is written as the kubelet writes it (podstatus.py):

- a pod bound here is admitted (resources fit, devices allocated) and reported Running; a refused one is
  Failed with the kubelet's reason (`UnexpectedAdmissionError` when Allocate failed, `OutOfcpu`...) and
  an event; a container whose PreStartContainer fails does not start (a `Failed` event, tried again every
  few seconds, the pod Pending meanwhile);
- a pod with `tessera.dev/sim-duration` (and restartPolicy Never or OnFailure) exits 0 after that long;
- a deleted pod stays Terminating, holding its devices, for its grace period; then its containers are
  reported killed and the pod is deleted with grace 0 (uid precondition), as the kubelet's status manager
  does.

What each container's Allocate answered (devices, envs, mounts) is written to
`<state dir>/containers/<namespace>_<pod>_<container>.json`: what a container runtime would have been told.

    python -m scheduler.sandbox.kubelet --node-name N --kubeconfig K --plugin-dir D --state-dir S
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from google.protobuf.json_format import MessageToDict
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from scheduler.api.duration import parse_duration
from scheduler.api.keys import SIM_DURATION
from scheduler.kube.event_queue import EventQueue, ResourceEvent
from scheduler.kube.informer import Informer, WatchTarget
from scheduler.sandbox import podstatus
from scheduler.sandbox.admission import AdmissionError, check_fit
from scheduler.sandbox.devices import DeviceManager
from scheduler.sandbox.node import MERGE_PATCH, NodeSpec, NodeStatus
from scheduler.sandbox.podresources import PodResourcesServer

log = logging.getLogger("tessera.sandbox.kubelet")
PRESTART_RETRY_S = 5.0  # the kubelet's back-off starts at 10 s; sooner here
Obj = dict[str, Any]


@dataclass
class PodRun:
    """A pod this node admitted (or refused), with the times of what happens to it next."""

    uid: str
    namespace: str
    name: str
    started: str = ""  # RFC 3339, once running
    finish_at: float | None = None  # monotonic: the containers exit 0 (sim-duration)
    start_at: float | None = None  # monotonic: try PreStartContainer again (it failed)
    kill_at: float | None = None  # monotonic: the grace period of a deletion ends
    done: bool = False  # terminal: devices freed, nothing more to do but deletion


class Kubelet:
    def __init__(self, api: client.ApiClient, spec: NodeSpec, plugin_dir: Path, state_dir: Path) -> None:
        self.core = client.CoreV1Api(api)
        self.spec = spec
        self.state_dir = state_dir
        self.devices = DeviceManager(plugin_dir, self._devices_changed)
        self.node = NodeStatus(self.core, client.CoordinationV1Api(api), spec, self.devices.resources)
        self.pod_resources = PodResourcesServer(
            state_dir / "pod-resources" / "kubelet.sock", self._active_pods
        )
        self._events = EventQueue()
        self.pods = Informer(
            WatchTarget(
                "Pod", self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={spec.name}"
            ),
            self._events.put,
        )
        self.runs: dict[str, PodRun] = {}
        self._ip_octet = zlib.crc32(spec.name.encode()) % 250 + 1
        self._next_ip = 2

    def _devices_changed(self) -> None:
        self.node.devices_changed()

    # ---- lifecycle ------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        (self.state_dir / "containers").mkdir(parents=True, exist_ok=True)
        self.node.register()
        self.devices.start()
        self.pod_resources.start()
        self.node.start()
        self.pods.start()
        self.pods.synced.wait(60)
        self.devices.retain_only({str(p["metadata"]["uid"]) for p in self.pods.snapshot() if _active(p)})
        try:
            while not stop.is_set():
                self._events.wait(0.2)
                for event in self._events.drain():
                    try:
                        self._on_pod(event)
                    except Exception:
                        log.exception("pod %s: handling its %s event failed", event.key, event.type)
                self._timers()
        finally:
            self.pods.stop()
            self.node.stop()
            self.pod_resources.stop()
            self.devices.stop()

    # ---- pods -----------------------------------------------------------------------------------------
    def _on_pod(self, event: ResourceEvent) -> None:
        pod = event.obj
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if event.type == "DELETED":
            self.runs.pop(uid, None)
            self.devices.release(uid)
            for record in (self.state_dir / "containers").glob(
                f"{meta.get('namespace')}_{meta.get('name')}_*.json"
            ):
                record.unlink(missing_ok=True)
            return
        run = self.runs.get(uid)
        if run is None:
            run = self.runs[uid] = PodRun(uid, str(meta.get("namespace")), str(meta.get("name")))
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                run.done = True
            elif phase == "Running":
                self._resume(run, pod)  # a restarted stand-in finds its pods running
            elif meta.get("deletionTimestamp") is None:
                self._admit(run, pod)
        if meta.get("deletionTimestamp") is not None:
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            # The grace period runs from when the kubelet starts killing; a second, shorter delete wins.
            kill_at = time.monotonic() + (0.0 if run.done or not run.started else grace)
            run.kill_at = kill_at if run.kill_at is None else min(run.kill_at, kill_at)

    def _resume(self, run: PodRun, pod: Obj) -> None:
        run.started = str((pod.get("status") or {}).get("startTime") or podstatus.now_rfc3339())
        duration = _sim_duration(pod)
        if duration is not None:
            elapsed = time.time() - _parse_time(run.started)
            run.finish_at = time.monotonic() + max(0.0, duration - elapsed)

    def _admit(self, run: PodRun, pod: Obj) -> None:
        try:
            others = [
                p for p in self.pods.snapshot() if _active(p) and p["metadata"]["uid"] in self._admitted()
            ]
            _, allocatable = self.node.resources()
            check_fit(pod, others, allocatable, device_resources=set(self.devices.resources()))
            answers = self._allocate(run, pod)
        except AdmissionError as exc:
            log.warning("pod %s/%s refused: %s: %s", run.namespace, run.name, exc.reason, exc)
            run.done = True
            self.devices.release(run.uid)
            self._status(run, podstatus.rejected(exc.reason, str(exc)))
            self._event(pod, "Warning", exc.reason, str(exc))
            return
        for container, answer in answers.items():
            self._record(run, container, answer)
        self._start(run, pod)

    def _start(self, run: PodRun, pod: Obj) -> None:
        """Start the containers: PreStartContainer first (init containers first); a failure keeps the pod
        Pending, with the kubelet's event, and is tried again."""
        spec = pod.get("spec") or {}
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            error = self.devices.pre_start(run.uid, c["name"])
            if error is not None:
                log.warning(
                    "pod %s/%s container %s not started: %s", run.namespace, run.name, c["name"], error
                )
                self._event(pod, "Warning", "Failed", f"Error: {error}")
                run.start_at = time.monotonic() + PRESTART_RETRY_S
                return
        run.start_at = None
        run.started = podstatus.now_rfc3339()
        pod_ip = f"10.244.{self._ip_octet}.{self._next_ip}"
        self._next_ip = self._next_ip % 250 + 2
        self._status(run, podstatus.running(pod, started=run.started, host_ip="127.0.0.1", pod_ip=pod_ip))
        for c in (pod.get("spec") or {}).get("containers") or []:
            self._event(pod, "Normal", "Started", f"Started container {c['name']}")
        duration = _sim_duration(pod)
        if duration is not None:
            run.finish_at = time.monotonic() + duration
        log.info("pod %s/%s running", run.namespace, run.name)

    def _allocate(self, run: PodRun, pod: Obj) -> dict[str, list[Obj]]:
        """Allocate every device resource of every container (init containers first), one call each."""
        spec = pod.get("spec") or {}
        answers: dict[str, list[Obj]] = {}
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            limits = (c.get("resources") or {}).get("limits") or {}
            for resource, raw in sorted(limits.items()):
                if not self.devices.serves(resource):
                    continue
                count = int(str(raw))
                if count <= 0:
                    continue
                answer = self.devices.allocate(run.uid, c["name"], resource, count)
                devices = self.devices.devices_of(run.uid).get(c["name"], {}).get(resource, [])
                answers.setdefault(c["name"], []).append(
                    {"resource": resource, "devices": devices, **MessageToDict(answer)}
                )
        return answers

    def _admitted(self) -> set[str]:
        return {uid for uid, run in self.runs.items() if (run.started or run.start_at) and not run.done}

    def _active_pods(self) -> list[tuple[Obj, dict[str, dict[str, list[str]]]]]:
        """The pods this node admitted or is admitting, with their devices (the PodResources API's list)."""
        out = []
        for run in list(self.runs.values()):
            pod = self.pods.get(f"{run.namespace}/{run.name}")
            if not run.done and pod is not None and pod["metadata"].get("uid") == run.uid:
                out.append((pod, self.devices.held_by(run.uid)))
        return out

    def _timers(self) -> None:
        now = time.monotonic()
        for run in list(self.runs.values()):
            if run.start_at is not None and now >= run.start_at and not run.done:
                pod = self.pods.get(f"{run.namespace}/{run.name}")
                if pod is not None and pod["metadata"].get("uid") == run.uid:
                    self._start(run, pod)
            if run.kill_at is not None and now >= run.kill_at:
                self._kill(run)
            elif run.finish_at is not None and not run.done and now >= run.finish_at:
                self._finish(run, exit_code=0, reason="Completed")

    def _finish(self, run: PodRun, *, exit_code: int, reason: str) -> None:
        pod = self.pods.get(f"{run.namespace}/{run.name}")
        run.done = True
        run.finish_at = None
        self.devices.release(run.uid)
        if pod is not None and pod["metadata"].get("uid") == run.uid:
            self._status(
                run, podstatus.terminated(pod, started=run.started, exit_code=exit_code, reason=reason)
            )

    def _kill(self, run: PodRun) -> None:
        """The grace period is over: containers killed, the pod deleted for good (grace 0, its uid)."""
        run.kill_at = None
        if not run.done and run.started:
            self._finish(run, exit_code=137, reason="Error")
        run.done = True
        self.devices.release(run.uid)
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=run.uid)
        )
        try:
            self.core.delete_namespaced_pod(run.name, run.namespace, body=options)
            log.info("pod %s/%s terminated and deleted", run.namespace, run.name)
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone already, or replaced by a pod of the same name
                log.warning("deleting pod %s/%s failed: %s", run.namespace, run.name, exc.reason)

    # ---- writes ---------------------------------------------------------------------------------------
    def _status(self, run: PodRun, status: Obj) -> None:
        body = {"metadata": {"uid": run.uid}, "status": status}
        try:
            self.core.patch_namespaced_pod_status(run.name, run.namespace, body, _content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("status of pod %s/%s not written: %s", run.namespace, run.name, exc.reason)

    def _event(self, pod: Obj, kind: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        now = podstatus.now_rfc3339()
        body: Any = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": "kubelet", "host": self.spec.name},
            "reportingComponent": "kubelet",
            "reportingInstance": self.spec.name,
        }
        try:
            self.core.create_namespaced_event(meta["namespace"], body)
        except ApiException as exc:
            log.warning("event %s on pod %s not written: %s", reason, meta["name"], exc.reason)

    def _record(self, run: PodRun, container: str, answers: list[Obj]) -> None:
        path = self.state_dir / "containers" / f"{run.namespace}_{run.name}_{container}.json"
        record = {
            "namespace": run.namespace,
            "pod": run.name,
            "uid": run.uid,
            "container": container,
            "node": self.spec.name,
            "allocations": answers,
        }
        path.write_text(json.dumps(record, indent=2))


def _active(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _sim_duration(pod: Obj) -> float | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(SIM_DURATION)
    if raw is None or (pod.get("spec") or {}).get("restartPolicy", "Always") == "Always":
        return None
    try:
        return parse_duration(raw)
    except ValueError:
        return None


def _parse_time(raw: str) -> float:
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def main(
    node_name: Annotated[str, typer.Option(help="The Node to register and serve.")],
    kubeconfig: Annotated[Path, typer.Option(help="Kubeconfig of system:node:<name>.")],
    plugin_dir: Annotated[Path, typer.Option(help="Device-plugin directory (kubelet.sock is served here).")],
    state_dir: Annotated[Path, typer.Option(help="Where the container records go.")],
    cpu: Annotated[str, typer.Option(help="CPU capacity of the fake node.")] = "32",
    memory: Annotated[str, typer.Option(help="Memory capacity of the fake node.")] = "256Gi",
    pods: Annotated[str, typer.Option(help="Pod slots of the fake node (a kubelet's maxPods).")] = "110",
    kubelet_version: Annotated[str, typer.Option(help="Version the Node reports.")] = "v1.34.4",
) -> None:
    """A kubelet stand-in for one fake node (see the module docstring)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api = config.new_client_from_config(config_file=str(kubeconfig))
    spec = NodeSpec(node_name, cpu=cpu, memory=memory, pods=pods, kubelet_version=kubelet_version)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    Kubelet(api, spec, plugin_dir, state_dir).run(stop)


if __name__ == "__main__":
    app()
