"""Feasibility as array expressions over the cluster state (numpy, CuPy or array-api-strict).

`gpu_fit` answers, for every node x GPU slot, whether one device-share of the pod fits on that GPU;
`node_mask` the per-node predicates (schedulable, selector, taints, GPU model, CPU, memory);
`feasible` combines both with "at least num_gpus fitting GPUs on the node".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.placement.node_rules import FILTERED_EFFECTS, ports_free, schedulable, terms_mask, untolerated
from scheduler.state.backend import ArrayNamespace
from scheduler.state.demand import PodDemand
from scheduler.state.node_arrays import NodeArrays

Array = Any


def gpu_need(state: NodeArrays, d: PodDemand) -> tuple[Array, Array]:
    """Per node x GPU: milli and MiB one device-share of `d` takes there (converted with GPU memory)."""
    xp = state.xp
    total = state.total_mib
    milli = xp.full(total.shape, d.gpu_milli, dtype=xp.int64)
    if d.gpu_mib:
        safe_total = xp.where(total > 0, total, xp.ones_like(total))
        from_mem = -((-d.gpu_mib * MILLI_PER_GPU) // safe_total)  # ceil division
        milli = xp.maximum(milli, from_mem)
    mib = xp.maximum(xp.full(total.shape, d.gpu_mib, dtype=xp.int64), (d.gpu_milli * total) // MILLI_PER_GPU)
    return milli, mib


def gpu_fit(state: NodeArrays, d: PodDemand) -> Array:
    """bool[N, G]: GPU can host one device-share of the pod."""
    xp = state.xp
    free_mib = xp.minimum(state.free_mib, state.report_free_mib)
    if not d.gpu_mib:
        # Fast path, same answer: a request in milli needs that milli on every GPU (a scalar, no arrays
        # to build) and its share of each GPU's memory. Called once per decision by the placer.
        if d.gpu_milli > MILLI_PER_GPU:
            return xp.zeros(state.present.shape, dtype=xp.bool)
        mib = (d.gpu_milli * state.total_mib) // MILLI_PER_GPU
        return state.present & state.healthy & (state.free_milli >= d.gpu_milli) & (free_mib >= mib)
    need_milli, need_mib = gpu_need(state, d)
    return (
        state.present
        & state.healthy
        & (xp.astype(state.free_milli, xp.int64) >= need_milli)
        & (free_mib >= need_mib)
        & (need_milli <= MILLI_PER_GPU)
    )


@dataclass(frozen=True)
class NodeChecks:
    """Per-node predicate masks, kept apart so an unschedulable pod can be told which one failed, in
    kube-scheduler's filter order (NodeUnschedulable, TaintToleration, NodeAffinity, NodePorts,
    NodeResourcesFit)."""

    usable: Array  # live, and not cordoned unless the pod tolerates it
    taints: Array  # no untolerated NoSchedule / NoExecute taint
    affinity: Array  # node selector and required node affinity match
    ports: Array  # no host port of the pod bound there
    model: Array
    cpu: Array
    memory: Array
    pods: Array  # a pod slot left (allocatable `pods`)
    scalars: tuple[tuple[str, Array], ...]  # per other resource requested: enough of it left

    def placeable(self) -> Array:
        """bool[N]: every check but the resources (where the pod could go if the nodes were empty)."""
        return self.usable & self.taints & self.affinity & self.ports & self.model

    def resources(self) -> Array:
        """bool[N]: CPU, memory, a pod slot and every other resource requested fit."""
        ok = self.cpu & self.memory & self.pods
        for _, mask in self.scalars:
            ok = ok & mask
        return ok


def _model_ok(state: NodeArrays, d: PodDemand) -> Array:
    xp = state.xp
    if not d.uses_gpu:
        return xp.ones(state.valid.shape, dtype=xp.bool)
    has_gpu = state.model >= 0
    if d.models is None:
        return has_gpu
    codes = [c for m in d.models if (c := state.models.get(m)) is not None]
    ok = xp.zeros(state.valid.shape, dtype=xp.bool)
    for c in codes:  # a handful of acceptable models at most
        ok = ok | (state.model == c)
    return ok


def _selector_ok(state: NodeArrays, d: PodDemand) -> Array:
    xp = state.xp
    ok = xp.ones(state.valid.shape, dtype=xp.bool)
    for pair in d.selector:
        col = state.labels.get(pair)
        if col is None:
            return xp.zeros(state.valid.shape, dtype=xp.bool)
        ok = ok & state.label_matrix[:, col]
    return ok


def node_checks(state: NodeArrays, d: PodDemand) -> NodeChecks:
    # Skip the passes that have nothing to check (the common case; each costs array ops on every call
    # of the incremental placer, which calls this once per placed pod).
    xp = state.xp
    everywhere = xp.ones(state.valid.shape, dtype=xp.bool)
    affinity = _selector_ok(state, d) if d.selector else everywhere
    if d.node_terms is not None:
        affinity = affinity & terms_mask(state, d.node_terms)
    return NodeChecks(
        usable=schedulable(state, d.tolerations),
        taints=~untolerated(state, d.tolerations, FILTERED_EFFECTS) if len(state.taints) else everywhere,
        affinity=affinity,
        ports=ports_free(state, d.host_ports) if d.host_ports else everywhere,
        model=_model_ok(state, d),
        cpu=state.free_cpu >= d.cpu_milli,
        memory=state.free_mem >= d.memory_mib,
        pods=state.free_pods >= 1,
        scalars=tuple((name, _scalar_ok(state, name, amount)) for name, amount in d.scalars),
    )


def _scalar_ok(state: NodeArrays, name: str, amount: int) -> Array:
    """bool[N]: at least `amount` of resource `name` left (none where no node advertises it)."""
    col = state.scalars.get(name)
    if col is None:
        return state.xp.zeros(state.valid.shape, dtype=state.xp.bool)
    return state.free_scalar[:, col] >= amount


def fit_counts(xp: ArrayNamespace, fit: Array) -> Array:
    return xp.sum(xp.astype(fit, xp.int32), axis=1)


def feasible(state: NodeArrays, d: PodDemand) -> tuple[Array, Array]:
    """(bool[N] feasible nodes, bool[N, G] fitting GPUs)."""
    xp = state.xp
    c = node_checks(state, d)
    mask = c.placeable() & c.resources()
    if not d.uses_gpu:
        return mask, xp.zeros(state.present.shape, dtype=xp.bool)
    fit = gpu_fit(state, d)
    return mask & (fit_counts(xp, fit) >= d.num_gpus), fit
