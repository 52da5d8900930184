"""Plain domain types the scheduler works with (parsed once from Kubernetes objects)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from scheduler.api.gpu_request import GPURequest
from scheduler.api.keys import GPU_ALLOCATED
from scheduler.model.constraints import NO_CONSTRAINTS, PodConstraints
from scheduler.model.frozen import frozen_for_the_checker


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    @property
    def code(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty = all effects

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ToleratesTaint: an empty effect matches every effect, an empty key (with Exists)
        every key; Equal (or no operator) compares values, Exists does not; any other operator never
        tolerates."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and self.value == taint.value


@dataclass(frozen=True)
class NodeInfo:
    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False  # spec.unschedulable (cordoned): only pods tolerating it go there
    # False: Tessera takes no new pod there at all (the Node is gone while pods still run there, or it
    # cannot be read); what runs there stays accounted.
    usable: bool = True
    gpu_uuids: tuple[str, ...] = ()  # by index, from the node's GPUNodeReport (gpu_identity.py)
    warning: str | None = None  # usable, but something is assumed (e.g. GPU memory from the model name)
    # Tessera's device plugin serves it: it advertises tessera.dev/gpu-slice (cache/handoff.py).
    gpu_plugin: bool = False
    # Allocatable `pods` (the kubelet's maxPods); None: the node does not say (a simulated node), no limit.
    pods: int | None = None
    # Allocatable of every other resource (ephemeral-storage, hugepages in bytes; extended resources in
    # units), by name: columns of the state's `free_scalar`.
    scalars: tuple[tuple[str, int], ...] = ()

    def uuid(self, index: int) -> str:
        """The GPU's UUID as its node agent reported it; "" while unknown (never an invented one: the
        device plugin then resolves the index on its own NVML)."""
        return self.gpu_uuids[index] if index < len(self.gpu_uuids) else ""


class PodPhase(StrEnum):
    PENDING = "Pending"
    BOUND = "Bound"  # bound by us, not yet reported running
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@frozen_for_the_checker  # (model/frozen.py) slots: 150,000 of them after a relist
class PodInfo:
    """One pod as the watch shows it, parsed once (`scheduler/model/parse.py` makes every one). `error`
    holds why its request is invalid (then never placed).

    Frozen (`frozen_for_the_checker`): what the scheduler does to a pod is not written on it. A pod it
    bound holds its place in the ledger (ASSUMED while the bind is in flight, then BOUND) until the watch
    shows it bound; a newer version of the pod is a new `PodInfo` (the mirror replaces the old one)."""

    uid: str
    namespace: str
    name: str
    queue: str
    priority: int
    preemptible: bool
    request: GPURequest
    cpu_milli: int = 0
    memory_mib: int = 0
    # Every other resource the pod requests (ephemeral-storage, hugepages, extended resources), as
    # integers by name (scheduler/model/requests.py says how the containers add up).
    scalars: tuple[tuple[str, int], ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    # Node affinity, inter-pod affinity, topology spread, host ports, volumes (model/constraints.py).
    constraints: PodConstraints = NO_CONSTRAINTS
    gates: tuple[str, ...] = ()  # spec.schedulingGates still on: not scheduled until removed

    labels: dict[str, str] = field(default_factory=dict)
    gpu_models: frozenset[str] | None = None
    group: str | None = None  # namespace/name of its PodGroup
    created_s: float = 0.0
    # status.startTime as Unix time (the kubelet's, or the simulated clock's); None: not started yet
    started_s: float | None = None
    phase: PodPhase = PodPhase.PENDING
    node: str | None = None
    ours: bool = True  # schedulerName is tessera
    error: str | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    terminating: bool = False  # being deleted (deletionTimestamp): it holds its GPU until it is gone
    grace_s: float = 30.0  # terminationGracePeriodSeconds
    # A controller owns it (recreates it when evicted): consolidation moves only such pods, since a move
    # is an eviction and a recreation. Parsed pods say; pods built by hand in tests default to movable.
    controlled: bool = True
    # Its PodDemand, worked out on first use (scheduler/state/demand.py: a function of this version alone;
    # a backlog of pending pods is looked at by several actions every cycle). Not part of the pod.
    demand_memo: object = field(default=None, init=False, repr=False, compare=False)
    # Its job's key (`scheduler/model/jobs.py` job_key), worked out on first use: a relist asks each pod's
    # several times, and the key string, kept, is the one every job map holds for it.
    job_memo: str | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:  # equal pods have the same uid (the maps it holds cannot be hashed)
        return hash(self.uid)

    @property
    def allocated(self) -> bool:
        """The device plugin marked it: the kubelet holds the devices it was answered with (DESIGN.md step 3)."""
        return GPU_ALLOCATED in self.annotations

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_resources(self) -> bool:
        """The watch shows it on a node (bound or running). A pod this scheduler bound holds resources
        before the watch says so: ask the ledger (`Ledger.on_node`)."""
        return self.node is not None and self.phase in (PodPhase.BOUND, PodPhase.RUNNING)


@dataclass(frozen=True)
class PodOverlay:
    """What the adapter knows of a pod beyond the object itself, handed to the parser with its watch event
    (never written into a copy of the object): the PodGroup the podgrouper put it in and the queue and
    priority class that group gives a pod of its own; the priority of its PriorityClass when the API server
    left `spec.priority` out."""

    group: str | None = None  # a PodGroup's name, in the pod's namespace
    queue: str | None = None
    priority_class: str | None = None
    priority: int | None = None


@frozen_for_the_checker  # slots: one per running pod
class GPUShare:
    """Part of one GPU given to a pod: slot index on the node, milli and MiB."""

    slot: int
    milli: int
    mib: int


@frozen_for_the_checker  # slots: one per running pod
class Placement:
    """One pod's place: it takes its GPU shares, CPU, memory, its other resources and one pod slot."""

    node: int  # row in the state arrays
    gpus: tuple[GPUShare, ...]
    cpu_milli: int
    memory_mib: int
    scalars: tuple[tuple[str, int], ...] = ()  # other resources by name (PodInfo.scalars)
    ports: tuple[str, ...] = ()  # host ports it binds ("protocol/port/hostIP")
