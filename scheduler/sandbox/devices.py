"""The kubelet stand-in's device manager: what the real kubelet's `devicemanager` does for device plugins.

- serves the `v1beta1.Registration` service on `<plugin dir>/kubelet.sock`;
- for each registered resource, dials the plugin's socket and follows its `ListAndWatch` stream (the
  node's capacity of that resource is the number of devices, its allocatable the healthy ones);
- for each container of an admitted pod that asks for a device resource, picks devices among the healthy
  ones no active pod holds (asking the plugin's `GetPreferredAllocation` when it offers it) and calls
  `Allocate` with them; a failure is the pod's admission error, worded as the kubelet words it;
- frees a pod's devices when the pod terminates, and keeps the allocations in a checkpoint file so a
  restarted stand-in does not hand the same device out twice (the kubelet's `kubelet_internal_checkpoint`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from device_plugin.v1beta1 import api_pb2, api_pb2_grpc
from scheduler.sandbox.admission import AdmissionError

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
CHECKPOINT = "kubelet_internal_checkpoint"
DIAL_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 30.0  # the kubelet's own Allocate deadline


def go_status(exc: grpc.RpcError) -> str:
    """A gRPC error as Go's status package prints it (the text the kubelet puts in the pod's message)."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    name = "".join(part.capitalize() for part in code.name.split("_"))
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"rpc error: code = {name} desc = {details}"


@dataclass
class Endpoint:
    """One registered resource: its plugin's socket, options and the devices its ListAndWatch sent."""

    resource: str
    socket: Path
    options: api_pb2.DevicePluginOptions
    channel: grpc.Channel
    stub: api_pb2_grpc.DevicePluginStub
    devices: dict[str, bool] = field(default_factory=dict)  # device ID -> healthy
    connected: bool = True

    def close(self) -> None:
        self.connected = False
        self.channel.close()


class DeviceManager(api_pb2_grpc.RegistrationServicer):
    def __init__(self, plugin_dir: Path, on_change: Callable[[], None]) -> None:
        self.plugin_dir = plugin_dir
        self._on_change = on_change
        self._lock = threading.RLock()
        self._endpoints: dict[str, Endpoint] = {}
        # pod uid -> container -> resource -> device IDs
        self._allocated: dict[str, dict[str, dict[str, list[str]]]] = {}
        # (pod uid, container, resource) reserved whose Allocate has not answered yet: not the container's
        # in the PodResources API until it has (as the kubelet records a container's devices only then)
        self._in_flight: set[tuple[str, str, str]] = set()
        self._server: grpc.Server | None = None
        self.registrations: list[str] = []  # resource names, in the order they registered
        self._load_checkpoint()

    # ---- lifecycle ------------------------------------------------------------------------------------
    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET

    def start(self) -> DeviceManager:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="registration"))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        log.info("serving the device-plugin Registration service on %s", self.socket_path)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(1).wait(3)
            self._server = None
        self.socket_path.unlink(missing_ok=True)
        with self._lock:
            for ep in self._endpoints.values():
                ep.close()

    # ---- Registration ---------------------------------------------------------------------------------
    def Register(self, request: api_pb2.RegisterRequest, context: grpc.ServicerContext) -> api_pb2.Empty:
        if request.version != API_VERSION:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unsupported device plugin API version {request.version!r} (this kubelet speaks {API_VERSION})",
            )
        if "/" not in request.resource_name or request.resource_name.startswith("kubernetes.io/"):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"invalid resource name {request.resource_name!r}"
            )
        socket = self.plugin_dir / request.endpoint
        channel = grpc.insecure_channel(f"unix://{socket}")
        try:
            grpc.channel_ready_future(channel).result(timeout=DIAL_TIMEOUT_S)
        except grpc.FutureTimeoutError:
            channel.close()
            context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot dial the plugin at {socket}")
        ep = Endpoint(
            request.resource_name, socket, request.options, channel, api_pb2_grpc.DevicePluginStub(channel)
        )
        with self._lock:
            old = self._endpoints.get(ep.resource)
            self._endpoints[ep.resource] = ep
            self.registrations.append(ep.resource)
        if old is not None:
            old.close()
        threading.Thread(
            target=self._list_and_watch, args=(ep,), name=f"lw-{ep.resource}", daemon=True
        ).start()
        log.info("registered %s (plugin socket %s)", ep.resource, socket)
        return api_pb2.Empty()

    def _list_and_watch(self, ep: Endpoint) -> None:
        try:
            for response in ep.stub.ListAndWatch(api_pb2.Empty()):
                with self._lock:
                    ep.devices = {d.ID: d.health == "Healthy" for d in response.devices}
                log.info("%s: %d devices, %d healthy", ep.resource, len(ep.devices), sum(ep.devices.values()))
                self._on_change()
        except grpc.RpcError as exc:
            if ep.connected:
                log.warning("%s: ListAndWatch ended: %s", ep.resource, go_status(exc))
        with self._lock:
            ep.connected = False
        self._on_change()  # allocatable of the resource drops to 0 until the plugin registers again

    # ---- what the node offers -------------------------------------------------------------------------
    def resources(self) -> dict[str, tuple[int, int]]:
        """Per resource: (capacity, allocatable) = (devices, healthy devices of a connected plugin)."""
        with self._lock:
            return {
                name: (len(ep.devices), sum(ep.devices.values()) if ep.connected else 0)
                for name, ep in self._endpoints.items()
            }

    def serves(self, resource: str) -> bool:
        with self._lock:
            return resource in self._endpoints

    # ---- allocation -----------------------------------------------------------------------------------
    def allocate(
        self, pod_uid: str, container: str, resource: str, count: int
    ) -> api_pb2.ContainerAllocateResponse:
        """Choose `count` devices of `resource` for the container and call the plugin's Allocate."""
        with self._lock:
            ep = self._endpoints.get(resource)
            if ep is None or not ep.connected:
                raise AdmissionError(
                    "UnexpectedAdmissionError",
                    f"Allocate failed due to no registered device plugin for resource {resource}, which is unexpected",
                )
            held = self._allocated.get(pod_uid, {}).get(container, {}).get(resource)
            free = self._free(ep, resource) if held is None or len(held) != count else []
        if held is not None and len(held) == count:
            devices = held  # a restart of the container keeps its devices
        else:
            if len(free) < count:
                raise AdmissionError(
                    "UnexpectedAdmissionError",
                    (
                        f"Allocate failed due to requested number of devices unavailable for {resource}. "
                        f"Requested: {count}, Available: {len(free)}, which is unexpected"
                    ),
                )
            # Asked without the lock, as the kubelet does: the plugin may ask back (PodResources).
            devices = self._preferred(ep, free, count)
        with self._lock:
            if held is None and set(devices) - set(self._free(ep, resource)):
                raise AdmissionError(
                    "UnexpectedAdmissionError",
                    f"Allocate failed due to devices {devices} taken meanwhile, which is unexpected",
                )
            # Reserved before the call, as the kubelet does, so a concurrent admission cannot take them.
            self._allocated.setdefault(pod_uid, {}).setdefault(container, {})[resource] = devices
            self._in_flight.add((pod_uid, container, resource))
        try:
            answer = ep.stub.Allocate(
                api_pb2.AllocateRequest(
                    container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=devices)]
                ),
                timeout=CALL_TIMEOUT_S,
            )
        except grpc.RpcError as exc:
            self._answered(pod_uid, container, resource)
            self.release(pod_uid)
            raise AdmissionError(
                "UnexpectedAdmissionError", f"Allocate failed due to {go_status(exc)}, which is unexpected"
            ) from None
        self._answered(pod_uid, container, resource)
        if len(answer.container_responses) != 1:
            self.release(pod_uid)
            raise AdmissionError(
                "UnexpectedAdmissionError",
                (
                    f"Allocate failed due to the plugin for {resource} answered {len(answer.container_responses)} "
                    "container responses for 1 container, which is unexpected"
                ),
            )
        self._save_checkpoint()
        response: api_pb2.ContainerAllocateResponse = answer.container_responses[0]
        return response

    def _free(self, ep: Endpoint, resource: str) -> list[str]:
        in_use = {d for pod in self._allocated.values() for c in pod.values() for d in c.get(resource, [])}
        return sorted(d for d, healthy in ep.devices.items() if healthy and d not in in_use)

    def _answered(self, pod_uid: str, container: str, resource: str) -> None:
        with self._lock:
            self._in_flight.discard((pod_uid, container, resource))

    def held_by(self, pod_uid: str) -> dict[str, dict[str, list[str]]]:
        """What the pod's containers hold once Allocate answered (the PodResources API's view)."""
        with self._lock:
            return {
                c: {r: list(ids) for r, ids in res.items() if (pod_uid, c, r) not in self._in_flight}
                for c, res in self._allocated.get(pod_uid, {}).items()
            }

    def _preferred(self, ep: Endpoint, free: list[str], count: int) -> list[str]:
        if not ep.options.get_preferred_allocation_available:
            return free[:count]
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=count)
            ]
        )
        try:
            answer = ep.stub.GetPreferredAllocation(request, timeout=CALL_TIMEOUT_S)
            chosen = list(answer.container_responses[0].deviceIDs)
        except (grpc.RpcError, IndexError) as exc:
            log.warning("%s: GetPreferredAllocation failed (%s); taking any free devices", ep.resource, exc)
            return free[:count]
        # The kubelet only trusts a preference that is a valid choice.
        if len(chosen) != count or len(set(chosen)) != count or not set(chosen) <= set(free):
            log.warning(
                "%s: preferred allocation %s is not %d free devices; ignored", ep.resource, chosen, count
            )
            return free[:count]
        return chosen

    def pre_start(self, pod_uid: str, container: str) -> str | None:
        """PreStartContainer for each resource of the container whose plugin asked for it; the error, worded
        as the kubelet words it, or None."""
        with self._lock:
            held = dict(self._allocated.get(pod_uid, {}).get(container, {}))
            endpoints = {r: self._endpoints.get(r) for r in held}
        for resource, devices in sorted(held.items()):
            ep = endpoints[resource]
            if ep is None or not ep.options.pre_start_required:
                continue
            try:
                ep.stub.PreStartContainer(
                    api_pb2.PreStartContainerRequest(devices_ids=devices), timeout=CALL_TIMEOUT_S
                )
            except grpc.RpcError as exc:
                return f"device plugin PreStartContainer rpc failed with err: {go_status(exc)}"
        return None

    def devices_of(self, pod_uid: str) -> dict[str, dict[str, list[str]]]:
        with self._lock:
            return {
                c: {r: list(ids) for r, ids in res.items()}
                for c, res in self._allocated.get(pod_uid, {}).items()
            }

    def release(self, pod_uid: str) -> None:
        """The pod terminated or is gone: its devices are free again."""
        with self._lock:
            if self._allocated.pop(pod_uid, None) is None:
                return
        self._save_checkpoint()

    def retain_only(self, active: set[str]) -> None:
        """Forget the allocations of pods that are no longer active (after a restart's first list)."""
        with self._lock:
            gone = [uid for uid in self._allocated if uid not in active]
            for uid in gone:
                del self._allocated[uid]
        if gone:
            self._save_checkpoint()

    # ---- checkpoint -----------------------------------------------------------------------------------
    def _load_checkpoint(self) -> None:
        try:
            data = json.loads((self.plugin_dir / CHECKPOINT).read_text())
        except (OSError, ValueError):
            return
        if isinstance(data, dict):
            self._allocated = {str(uid): pod for uid, pod in data.items() if isinstance(pod, dict)}

    def _save_checkpoint(self) -> None:
        with self._lock:
            text = json.dumps(self._allocated, sort_keys=True)
        path = self.plugin_dir / CHECKPOINT
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
