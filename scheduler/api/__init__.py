"""The shared contract between Tessera's components.

Everything here is plain pydantic / stdlib: no numpy, no Kubernetes client, so the node agent and the
device plugin can import it without pulling in the scheduler.
"""

from scheduler.api.allocation import AllocatedGPU, GPUAllocation
from scheduler.api.assignment import AssignedGPU, GPUAssignment
from scheduler.api.gpu_request import GPURequest, InvalidGPURequest, parse_gpu_request
from scheduler.api.keys import GROUP, VERSION
from scheduler.api.podgroup import PodGroup, PodGroupSpec, PodGroupStatus
from scheduler.api.priority import PRIORITY_CLASSES, PriorityClassInfo, resolve_priority
from scheduler.api.queue import Queue, QueueResource, QueueResources, QueueSpec, QueueStatus
from scheduler.api.report import GPUNodeReport, GPUNodeReportSpec, GPUProcess, GPUReport
from scheduler.api.topology import Topology, TopologyConstraint, TopologyLevel, TopologySpec

__all__ = [
    "GROUP",
    "PRIORITY_CLASSES",
    "VERSION",
    "AllocatedGPU",
    "AssignedGPU",
    "GPUAllocation",
    "GPUAssignment",
    "GPUNodeReport",
    "GPUNodeReportSpec",
    "GPUProcess",
    "GPUReport",
    "GPURequest",
    "InvalidGPURequest",
    "PodGroup",
    "PodGroupSpec",
    "PodGroupStatus",
    "PriorityClassInfo",
    "Queue",
    "QueueResource",
    "QueueResources",
    "QueueSpec",
    "QueueStatus",
    "Topology",
    "TopologyConstraint",
    "TopologyLevel",
    "TopologySpec",
    "parse_gpu_request",
    "resolve_priority",
]
