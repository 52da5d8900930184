"""Why a pod fits nowhere, in words a person can act on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.placement.filters import fit_counts, gpu_fit, node_checks
from scheduler.state.backend import ArrayNamespace
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays


def _count(xp: ArrayNamespace, mask: object) -> int:
    return int(xp.sum(xp.astype(mask, xp.int64)))


def explain_unschedulable(state: NodeArrays, d: PodDemand, extra: Sequence[tuple[str, Any]] = ()) -> str:
    """Count, in filter order, how many live nodes each predicate removed; `extra`: (reason, bool[N] rows
    that pass) of the checks after the resources (inter-pod rules, volumes), in their order.

    E.g. "no node fits 500 milli of a GPU (model A100): 12 nodes lack 1 GPU with room, 3 short of CPU".
    """
    xp = state.xp
    live = state.valid | state.cordoned
    total = _count(xp, live)
    if total == 0:
        return "no schedulable node in the cluster"
    c = node_checks(state, d)
    parts: list[str] = []
    remaining = live
    # kube-scheduler's words for the filters it shares (NodeUnschedulable ... NodePorts)
    for mask, label in (
        (c.usable, "node(s) were unschedulable"),
        (c.taints, "node(s) had untolerated taint(s)"),
        (c.affinity, "node(s) didn't match Pod's node affinity/selector"),
        (c.ports, "node(s) didn't have free ports for the requested pod ports"),
    ):
        if (n := _count(xp, remaining & ~mask)) > 0:
            parts.append(f"{n} {label}")
        remaining = remaining & mask

    if d.uses_gpu:
        excluded = remaining & ~c.model
        if (n := _count(xp, excluded)) > 0:
            what = f"model not in {'|'.join(sorted(d.models))}" if d.models else "no GPUs"
            parts.append(f"{n} with {what}")
        remaining = remaining & c.model
    # kube-scheduler's words for the resources it checks the same way (NodeResourcesFit)
    checks = [(c.pods, "Too many pods"), (c.cpu, "short of CPU"), (c.memory, "short of memory")]
    checks += [(mask, f"Insufficient {name}") for name, mask in c.scalars]
    for mask, label in checks:
        if (n := _count(xp, remaining & ~mask)) > 0:
            parts.append(f"{n} {label}")
        remaining = remaining & mask
    if d.uses_gpu:
        fits = fit_counts(xp, gpu_fit(state, d)) >= d.num_gpus
        if (n := _count(xp, remaining & ~fits)) > 0:
            room = "a free GPU" if d.whole else "a GPU with room"
            if d.num_gpus > 1:
                room = f"{d.num_gpus} {'free GPUs' if d.whole else 'GPUs with room'}"
            parts.append(f"{n} lack {room}")
        remaining = remaining & fits
    for label, mask in extra:
        if (n := _count(xp, remaining & ~mask)) > 0:
            parts.append(f"{n} {label}")
        remaining = remaining & mask
    detail = "; ".join(parts) if parts else "capacity taken by pods placed earlier this cycle"
    what = d.describe() if d.uses_gpu else "the pod"
    return f"no node fits {what} (of {total} nodes: {detail})"
