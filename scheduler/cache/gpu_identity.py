"""Each node's GPU identity (UUID, memory, model) and health, learned from its `GPUNodeReport`.

The node agent is the one source: it reads NVML and publishes the node's report; the scheduler copies the
UUIDs from it into every assignment, and the device plugin checks them against its own NVML view. No node
annotation is read. What a report says wins over the Node's labels (NVIDIA's GPU Feature Discovery sets
`nvidia.com/gpu.memory` and `nvidia.com/gpu.product`; clusters without it have only the report).

Until a node's report arrives:
- assignments name its GPUs by index only (`uuid` empty): the device plugin resolves the index on its
  NVML, the same enumeration the agent reports, so nothing is ever named by an invented UUID;
- a GPU node without the memory label has GPUs of unknown memory, which take no GPU pod (a fraction
  could not be converted to MiB) until the report says how much memory they have. `unknown_memory` says
  so, per node, for as long as it lasts (the cycle makes a warning of it, gone once the report came).

Health and NVML-measured memory use go into the state arrays on every report, and again after every Node
update, which rewrites the node's row (a kubelet's status, a label: Node updates).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.keys import GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL
from scheduler.api.report import GPUNodeReport
from scheduler.model.types import NodeInfo
from scheduler.state.cluster_state import ClusterState

log = logging.getLogger(__name__)


@dataclass
class GPUIdentities:
    """Reports by node, and each node as its Node object declares it (before the report completes it)."""

    reports: dict[str, GPUNodeReport] = field(default_factory=dict)
    _declared: dict[str, NodeInfo] = field(default_factory=dict)
    # Node -> why its GPUs take no GPU pod now (memory unknown): the present, not a history.
    unknown_memory: dict[str, str] = field(default_factory=dict)
    _held: set[str] = field(default_factory=set)  # nodes whose GPUs `measure` held back (memory unknown)

    def complete(self, node: NodeInfo) -> NodeInfo:
        """`node` (just parsed from its Node object) with what its report says; remembered for later
        reports. A GPU node whose memory nobody told us is in `unknown_memory` until someone does."""
        self._declared[node.name] = node
        done = self._completed(node)
        if done.gpu_count and done.gpu_memory_mib <= 0:
            product = node.labels.get(GPU_PRODUCT_LABEL)
            named = f"its product {product!r} names no known model" if product else "no product label"
            self.unknown_memory[node.name] = (
                f"node {node.name} has {node.gpu_count} GPUs of unknown memory (no {GPU_MEMORY_LABEL} "
                f"label, {named}, no GPUNodeReport yet): they take no GPU pod until its node agent "
                f"reports or you label it {GPU_MEMORY_LABEL}=<MiB>"
            )
        else:
            self.unknown_memory.pop(node.name, None)
        return done

    def _completed(self, node: NodeInfo) -> NodeInfo:
        report = self.reports.get(node.name)
        if report is None or not report.spec.gpus:
            return dataclasses.replace(node, gpu_uuids=()) if node.gpu_uuids else node
        if not node.gpu_count:
            # None counted now (a dip of its count), but pods may still hold some (kept, draining): they
            # keep the memory the report measured.
            reported = [g.memory_total_mib for g in report.spec.gpus if g.memory_total_mib > 0]
            memory = node.gpu_memory_mib if node.gpu_memory_mib > 0 or not reported else min(reported)
            return dataclasses.replace(node, gpu_uuids=(), gpu_memory_mib=memory)
        by_index = {g.index: g for g in report.spec.gpus if g.index < node.gpu_count}
        uuids = tuple(by_index[i].uuid if i in by_index else "" for i in range(node.gpu_count))
        # One memory figure per node (the state converts fractions with it): the smallest GPU's, so a
        # fraction never gets more MiB than its GPU has.
        memories = [g.memory_total_mib for g in by_index.values() if g.memory_total_mib > 0]
        memory = min(memories) if memories else node.gpu_memory_mib
        model = node.gpu_model
        if model in ("", "unknown") and by_index:
            model = by_index[min(by_index)].model
        # A memory assumed from the product name (objects.py) is replaced by the measured one.
        warning = None if memories else node.warning
        if (uuids, memory, model, warning) == (
            node.gpu_uuids,
            node.gpu_memory_mib,
            node.gpu_model,
            node.warning,
        ):
            return node
        return dataclasses.replace(
            node, gpu_uuids=uuids, gpu_memory_mib=memory, gpu_model=model, warning=warning
        )

    def measure(self, state: ClusterState, name: str) -> None:
        """Write the report's health and measured use of node `name`'s GPUs into the arrays."""
        row = state.row_of(name)
        node = state.nodes[row] if row is not None else None
        if row is None or node is None:
            return
        if node.gpu_count and node.gpu_memory_mib <= 0:
            for slot in range(node.gpu_count):
                state.set_gpu_health(row, slot, False)
            self._held.add(name)
            return
        if name in self._held:  # its memory is known now: the GPUs are usable again
            self._held.discard(name)
            for slot in range(node.gpu_count):
                state.set_gpu_health(row, slot, True)
        report = self.reports.get(name)
        if report is None:
            return
        for gpu in report.spec.gpus:
            if gpu.index >= min(state.max_gpus, node.gpu_count):
                continue
            state.set_gpu_health(row, gpu.index, gpu.health != "Unhealthy")
            state.set_reported_used(row, gpu.index, gpu.memory_used_mib)

    def on_report(self, state: ClusterState, event_type: str, obj: Mapping[str, Any]) -> str:
        """A report was added, changed or deleted: complete its node again if it is known. Returns the
        node's name."""
        report = GPUNodeReport.model_validate(obj)  # a ValidationError is the caller's to report
        name = report.spec.node
        if event_type == "DELETED":
            self.reports.pop(name, None)
        else:
            self.reports[name] = report
        declared = self._declared.get(name)
        row = state.row_of(name)
        if declared is None or row is None:
            return name  # the Node event completes it when it comes
        node = self.complete(declared)
        if node != state.nodes[row]:
            log.info("node %s: GPU identity from its GPUNodeReport: %s", name, ",".join(node.gpu_uuids))
            state.add_node(node)  # an update: keeps what is allocated there
        self.measure(state, name)
        return name

    def forget(self, name: str) -> None:
        """The Node is gone (its report, if any, stays: the same GPUs come back with the node)."""
        self._declared.pop(name, None)
        self.unknown_memory.pop(name, None)
        self._held.discard(name)
