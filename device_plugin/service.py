"""The DevicePlugin gRPC service for one resource."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import grpc

from device_plugin.allocator import AllocationError, Allocator
from device_plugin.inventory import Inventory
from device_plugin.resources import Resource
from device_plugin.v1beta1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)
# How often an idle ListAndWatch stream checks that its client is still there.
STREAM_CHECK_S = 1.0


class DevicePluginService(api_pb2_grpc.DevicePluginServicer):
    def __init__(
        self, resource: Resource, inventory: Inventory, allocator: Allocator, stopping: threading.Event
    ) -> None:
        self._resource = resource
        self._inventory = inventory
        self._allocator = allocator
        self._stopping = stopping

    def options(self) -> api_pb2.DevicePluginOptions:
        # PreStartContainer: the plugin confirms there, through the kubelet's PodResources API, that the
        # container's devices are held by the pod they were answered for (allocator.py).
        return api_pb2.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True)

    def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        return self.options()

    def ListAndWatch(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        seen = self._inventory.version
        yield api_pb2.ListAndWatchResponse(devices=self._resource.devices(self._inventory.gpus()))
        while context.is_active() and not self._stopping.is_set() and not self._inventory.closed:
            version = self._inventory.wait_for_change(seen, STREAM_CHECK_S)
            if version != seen and not self._inventory.closed:
                seen = version
                log.info("resource=%s device health changed; re-sending the list", self._resource.name)
                yield api_pb2.ListAndWatchResponse(devices=self._resource.devices(self._inventory.gpus()))

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreferredAllocationResponse:
        resp = api_pb2.PreferredAllocationResponse()
        for creq in request.container_requests:
            ids = self._allocator.preferred(
                self._resource,
                list(creq.available_deviceIDs),
                list(creq.must_include_deviceIDs),
                creq.allocation_size,
            )
            resp.container_responses.append(api_pb2.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return resp

    def Allocate(
        self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocateResponse:
        requests = [list(c.devices_ids) for c in request.container_requests]
        try:
            self._check_known(requests)
            responses = self._allocator.allocate(self._resource, requests)
        except AllocationError as exc:
            log.warning("resource=%s allocate refused: %s", self._resource.name, exc)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"tessera: {exc}")
        return api_pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreStartContainerResponse:
        ids = list(request.devices_ids)
        try:
            self._check_known([ids])
            self._allocator.pre_start(self._resource, ids)
        except AllocationError as exc:
            log.warning("resource=%s prestart refused: %s", self._resource.name, exc)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"tessera: {exc}")
        return api_pb2.PreStartContainerResponse()

    def _check_known(self, requests: list[list[str]]) -> None:
        for ids in requests:
            for device_id in ids:
                if self._inventory.by_uuid(self._resource.gpu_uuid(device_id)) is None:
                    raise AllocationError(f"unknown {self._resource.name} device {device_id} on this node")
