"""Where a pod found running holds resources, read from what the cluster says (for the mirror).

From its `tessera.dev/gpu-assignment` when it has one: written by the scheduler at bind, it names the node,
the GPUs and each share, so a restarted scheduler rebuilds exactly what it had. A pod of another scheduler
asking for whole GPUs Tessera's device plugin serves: on the GPUs the plugin recorded it gave it
(`tessera.dev/gpu-allocated`, written by the plugin alone). Otherwise (before the plugin has, or where
NVIDIA's plugin serves whole GPUs) as whole GPUs taken on its node's free slots.

Whatever arrived first: a pod found running on a node whose GPU memory is not known yet (no
`nvidia.com/gpu.memory` label, its GPUNodeReport still to come) holds its GPU shares in milli at once, with
0 MiB (`unsized`); the mirror fills the MiB in when the memory becomes known (`sized`).
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.api.allocation import GPUAllocation
from scheduler.api.assignment import read_assignment
from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT, MILLI_PER_GPU
from scheduler.model.types import GPUShare, Placement, PodInfo
from scheduler.state.cluster_state import ClusterState

# The largest GPU index an assignment may name (a GPU the node no longer counts is kept up to this one).
MAX_SLOT = 64


class Unaccountable(ValueError):
    """The pod's assignment cannot be used (malformed, another node, a GPU index out of range)."""


def from_assignment(state: ClusterState, pod: PodInfo, row: int) -> Placement | None:
    """The placement its assignment names (None: it has none). Raises Unaccountable with a one-line
    reason. A GPU the node no longer counts (a restart during a dip of its GPU count) is kept, draining."""
    raw = pod.annotations.get(GPU_ASSIGNMENT)
    if not raw:
        return None
    try:
        a = read_assignment(raw)
    except ValueError as exc:
        raise Unaccountable(f"pod {pod.key}: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    if a.node != pod.node:
        raise Unaccountable(f"pod {pod.key}: assignment names node {a.node} but it is bound to {pod.node}")
    node = state.nodes[row]
    for g in a.gpus:
        if not 0 <= g.index < MAX_SLOT:
            raise Unaccountable(f"pod {pod.key}: assignment names GPU {g.index}, which no node has")
        if node is not None and g.index >= node.gpu_count:
            state.keep_slot(row, g.index)
    shares = tuple(
        GPUShare(g.index, g.milli, _mib(state, row, g.index, g.milli, g.memory_mib)) for g in a.gpus
    )
    return Placement(row, shares, pod.cpu_milli, pod.memory_mib, pod.scalars, pod.constraints.host_ports)


def from_allocation(state: ClusterState, pod: PodInfo, row: int) -> Placement | None:
    """Whole GPUs the device plugin gave a pod the scheduler did not place, as its `tessera.dev/gpu-allocated`
    names them; None when it names none (or cannot be read: the pod is then charged on free GPUs). GPUs the
    node does not have are left out."""
    raw = pod.annotations.get(GPU_ALLOCATED)
    if not raw or GPU_ASSIGNMENT in pod.annotations or pod.request.kind != "whole":
        return None
    try:
        allocation = GPUAllocation.from_annotation(raw)
    except ValueError:
        return None
    slots = sorted(
        {g.index for g in allocation.gpus if g.index < state.max_gpus and bool(state.present[row, g.index])}
    )
    if not slots:
        return None
    shares = tuple(GPUShare(j, MILLI_PER_GPU, int(state.total_mib[row, j])) for j in slots)
    return Placement(node=row, gpus=shares, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib)


def _mib(state: ClusterState, row: int, slot: int, milli: int, assigned: int) -> int:
    """The MiB a share holds on its GPU: what the assignment says (or its milli's worth), never more than
    the GPU has; 0 while the GPU's memory is unknown (see `unsized`)."""
    total = int(state.total_mib[row, slot])
    if milli >= MILLI_PER_GPU:
        return total
    return min(assigned or state.share_for(row, slot, milli, 0).mib, total)


def unsized(state: ClusterState, placements: list[Placement]) -> list[bool]:
    """Whether each placement holds GPUs whose memory is not known yet (its MiB are to be filled in): the
    memory of all the GPUs they hold read in one gather (a relist's)."""
    rows = [pl.node for pl in placements for _ in pl.gpus]
    if not rows:
        return [False] * len(placements)
    xp = state.xp
    slots = [g.slot for pl in placements for g in pl.gpus]
    known = state.host(state.total_mib[xp.asarray(rows), xp.asarray(slots)] > 0).tolist()
    out, i = [], 0
    for pl in placements:
        n = len(pl.gpus)
        out.append(n > 0 and not all(known[i : i + n]))
        i += n
    return out


def sized(state: ClusterState, placement: Placement) -> Placement:
    """The same shares, with the MiB their GPUs have now (whole GPUs: all of it; a fraction: what it held,
    or its milli's worth while that was unknown)."""
    shares = tuple(
        replace(g, mib=_mib(state, placement.node, g.slot, g.milli, g.mib)) for g in placement.gpus
    )
    return replace(placement, gpus=shares)


def whole_gpus_taken(pod: PodInfo) -> int:
    """How many whole GPUs `from_request` takes for the pod: none for a pod that asks none, an invalid one,
    or a fractional one (without an assignment it was not placed by us: no GPU share is counted). With
    none, its placement does not depend on the arrays."""
    if pod.error or pod.request.is_fractional or pod.request.kind != "whole":
        return 0
    return pod.request.num_devices


def from_request(state: ClusterState, pod: PodInfo, row: int) -> Placement | None:
    """Whole GPUs on the node's free slots for a pod without an assignment; None when too few are free."""
    n = whole_gpus_taken(pod)
    if not n:  # (most pods found running without an assignment ask for no GPU: a relist's 100,000)
        return without_gpus(pod, row)
    free = [
        j for j in range(state.max_gpus)
        if bool(state.present[row, j]) and int(state.free_milli[row, j]) == MILLI_PER_GPU
    ]  # fmt: skip
    if len(free) < n:
        return None
    shares = tuple(GPUShare(j, MILLI_PER_GPU, int(state.total_mib[row, j])) for j in free[:n])
    return Placement(row, shares, pod.cpu_milli, pod.memory_mib, pod.scalars, pod.constraints.host_ports)


# Places without GPUs, shared: the replicas of a controller on one node ask alike, and a Placement is never
# written (a change is a new one), so pods holding equal ones may hold the same (8 MiB of a relist).
_WITHOUT_GPUS: dict[tuple[int, int, int, tuple[tuple[str, int], ...], tuple[str, ...]], Placement] = {}


def without_gpus(pod: PodInfo, row: int) -> Placement:
    """`from_request` for a pod that takes no whole GPU (`whole_gpus_taken` is 0): what it asks but GPUs."""
    key = (row, pod.cpu_milli, pod.memory_mib, pod.scalars, pod.constraints.host_ports)
    found = _WITHOUT_GPUS.get(key)
    if found is None:
        if len(_WITHOUT_GPUS) >= 65536:
            _WITHOUT_GPUS.clear()
        found = _WITHOUT_GPUS[key] = Placement(row, (), *key[1:])
    return found
