"""The cluster as a structure of arrays, kept current by incremental updates.

Rows are nodes, columns GPU slots (up to the largest GPU count seen). A placement or release is a handful
of element writes (`write`); rows of removed nodes are recycled. Every change of a row bumps `version`
and stamps the row with it (`row_version`): that is the one way readers find what changed since they last
looked (`changed_rows`), however many of them there are. The scheduler changes placements only through
its ledger (`scheduler/cache/ledger.py`), which keeps the undo; `place`/`release` with `checkpoint`/`rollback`
journal here for direct users (trace replay, tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.api.keys import MILLI_PER_GPU
from scheduler.api.limits import MAX_PODS_PER_NODE
from scheduler.model.types import GPUShare, NodeInfo, Placement
from scheduler.state.backend import ArrayNamespace
from scheduler.state.bulk import placement_totals
from scheduler.state.codebook import Codebook, LabelBook, TaintBook
from scheduler.state.domains import DomainColumns
from scheduler.state.key_domains import KeyDomains
from scheduler.state.node_arrays import ROW_ARRAYS
from scheduler.state.row_view import RowView

# Rows changed are logged (one entry per version) up to this many; older questions get None.
_CHANGE_LOG_MAX = 1 << 16
# The pod slots of a node that does not say how many pods it takes (a simulated node): never the limit.
UNLIMITED_PODS = MAX_PODS_PER_NODE << 20


class OvercommitError(RuntimeError):
    """A placement would push a GPU, or a node's CPU/memory, below zero free. Always a scheduler bug."""


@dataclass(frozen=True)
class _JournalEntry:
    placement: Placement | None  # None for a bulk entry (see `batch`)
    sign: int  # +1 placed, -1 released
    batch: tuple[Placement, ...] = ()  # `apply_many`: one entry for the whole burst


class ClusterState:
    def __init__(self, xp: ArrayNamespace, *, max_gpus: int = 8, capacity: int = 16) -> None:
        self.xp = xp
        self.max_gpus = max(1, max_gpus)
        self.capacity = 0
        self.node_names: list[str | None] = []
        self.node_index: dict[str, int] = {}
        self.nodes: list[NodeInfo | None] = []
        self._free_rows: list[int] = []
        self.models = Codebook()
        self.labels = LabelBook()
        self.taints = TaintBook()
        self.ports = Codebook()  # host ports in use ("protocol/port/hostIP"): the columns of port_use
        self.scalars = Codebook()  # resource names: the columns of free_scalar / total_scalar
        self.domains = DomainColumns()  # topology levels: the columns of `domain`
        # Per node label key some pod's affinity or spread names: each row's domain code (key_domains.py).
        self.key_domains = KeyDomains(xp, 0)
        self._journal: list[_JournalEntry] = []
        self.version = 0  # bumped on every change of a row; lets callers cache derived values
        self._changes: list[int] = []  # the row changed at version _changes_base + 1 + i
        self._changes_base = 0
        self.node_epoch = 0  # bumped when a node is added, updated or removed (not on placements)
        # Per row: GPU slots the node no longer has (its GPU count dipped) that pods still hold: kept present
        # but unhealthy, so their holdings stay in the arrays and nothing new goes there; retired once free.
        self.draining: dict[int, set[int]] = {}
        # Per row: GPU slots where a running pod could not be charged (its hold failed: an assignment that
        # cannot be read, or that over-commits the GPU): unhealthy, so no new pod goes there until it is.
        self.blocked: dict[int, set[int]] = {}
        self._allocate(max(capacity, 1), label_cols=8, taint_cols=4, scalar_cols=2, port_cols=2)

    # ----------------------------------------------------------------------------------------- storage
    def _allocate(
        self, rows: int, *, label_cols: int, taint_cols: int, scalar_cols: int, port_cols: int
    ) -> None:
        xp, g = self.xp, self.max_gpus
        i32 = xp.int32
        self.free_milli = xp.zeros((rows, g), dtype=i32)
        self.free_mib = xp.zeros((rows, g), dtype=xp.int64)
        self.report_free_mib = xp.zeros((rows, g), dtype=xp.int64)
        self.total_mib = xp.zeros((rows, g), dtype=xp.int64)
        self.present = xp.zeros((rows, g), dtype=xp.bool)
        self.healthy = xp.zeros((rows, g), dtype=xp.bool)
        self.free_cpu = xp.zeros((rows,), dtype=xp.int64)
        self.free_mem = xp.zeros((rows,), dtype=xp.int64)
        self.total_cpu = xp.zeros((rows,), dtype=xp.int64)
        self.total_mem = xp.zeros((rows,), dtype=xp.int64)
        # One slot per pod (allocatable `pods`), and every other resource a node advertises (a column per
        # name in `scalars`: ephemeral-storage, hugepages, extended resources; 0 where a node has none).
        self.free_pods = xp.zeros((rows,), dtype=xp.int64)
        self.total_pods = xp.zeros((rows,), dtype=xp.int64)
        self.free_scalar = xp.zeros((rows, scalar_cols), dtype=xp.int64)
        self.total_scalar = xp.zeros((rows, scalar_cols), dtype=xp.int64)
        self.model = xp.full((rows,), -1, dtype=i32)
        self.valid = xp.zeros((rows,), dtype=xp.bool)  # live, usable and not cordoned
        self.cordoned = xp.zeros((rows,), dtype=xp.bool)  # live and usable, but spec.unschedulable
        # pods per row binding each host port (a column per "protocol/port/hostIP" in `ports`)
        self.port_use = xp.zeros((rows, port_cols), dtype=xp.int32)
        self.label_matrix = xp.zeros((rows, label_cols), dtype=xp.bool)
        self.taint_matrix = xp.zeros((rows, taint_cols), dtype=xp.bool)
        # per topology level, the node's domain code (-1: outside that topology); see state/domains.py
        self.domain = xp.full((rows, self.domains.width), -1, dtype=i32)
        # version at which each row last changed: a cache compares it with the version it saw last and
        # re-scores only the rows that moved since (an array op, no per-consumer bookkeeping here)
        self.row_version = xp.zeros((rows,), dtype=xp.int64)
        self.row_id = xp.arange(rows, dtype=xp.int64)  # each row's own index (a RowView gathers it)
        self.capacity = rows
        self.key_domains.grow(rows)

    def _grow_rows(self, rows: int) -> None:
        xp = self.xp
        for name in ROW_ARRAYS:
            old = getattr(self, name)
            pad_shape = (rows - old.shape[0], *old.shape[1:])
            fill = -1 if name in ("model", "domain") else 0
            pad = xp.full(pad_shape, fill, dtype=old.dtype)
            if name == "row_id":
                pad = xp.arange(old.shape[0], rows, dtype=old.dtype)
            setattr(self, name, xp.concat([old, pad], axis=0))
        self.capacity = rows
        self.key_domains.grow(rows)

    def _grow_cols(self, name: str, cols: int) -> None:
        old = getattr(self, name)
        pad = self.xp.zeros((old.shape[0], cols - old.shape[1]), dtype=old.dtype)
        setattr(self, name, self.xp.concat([old, pad], axis=1))

    def _grow_gpus(self, gpus: int) -> None:
        for name in ("free_milli", "free_mib", "report_free_mib", "total_mib", "present", "healthy"):
            self._grow_cols(name, gpus)
        self.max_gpus = gpus

    def _scalar_column(self, name: str) -> int:
        """The column of resource `name` in free_scalar and total_scalar (both grown together)."""
        col = self._column(self.scalars, "free_scalar", name)
        if self.total_scalar.shape[1] < self.free_scalar.shape[1]:
            self._grow_cols("total_scalar", self.free_scalar.shape[1])
        return col

    def _column(self, book: Codebook, matrix: str, name: str) -> int:
        col = book.code(name)
        width = getattr(self, matrix).shape[1]
        if col >= width:
            self._grow_cols(matrix, max(width * 2, col + 1))
        return col

    # ------------------------------------------------------------------------------------------- nodes
    @property
    def num_rows(self) -> int:
        """Rows in use (valid or recycled); kernels may look at all `capacity` rows, masked by `valid`."""
        return len(self.node_names)

    def _touch(self, row: int) -> None:
        self.version += 1
        self.row_version[row] = self.version
        self._changes.append(row)
        if len(self._changes) > _CHANGE_LOG_MAX:
            drop = len(self._changes) // 2
            del self._changes[:drop]
            self._changes_base += drop

    def changed_rows(self, since: int) -> list[int] | None:
        """The rows changed after version `since` (sorted), from the log: what `row_version > since`
        selects, without a pass over every row. None when the log no longer reaches back that far."""
        if since < self._changes_base:
            return None
        return sorted(set(self._changes[since - self._changes_base :]))

    def add_node(self, node: NodeInfo) -> int:
        """Add or update a node (an update keeps what is allocated on it)."""
        if node.name in self.node_index:
            return self.update_node(node)
        if node.gpu_count > self.max_gpus:
            self._grow_gpus(node.gpu_count)
        if self._free_rows:
            row = self._free_rows.pop()
            self.node_names[row] = node.name
            self.nodes[row] = node
        else:
            row = len(self.node_names)
            if row >= self.capacity:
                self._grow_rows(max(self.capacity * 2, 16))
            self.node_names.append(node.name)
            self.nodes.append(node)
        self.node_index[node.name] = row
        self._write_node(row, node, alloc_milli=None)
        return row

    def update_node(self, node: NodeInfo) -> int:
        row = self.node_index[node.name]
        if node.gpu_count > self.max_gpus:
            self._grow_gpus(node.gpu_count)
        g = self.max_gpus
        # Only GPUs that were present hold allocations: a node that gains GPUs (the kubelet registers the
        # Node first and adds the device plugin's GPUs to its capacity later) gets them free.
        was = [bool(self.present[row, j]) for j in range(g)]
        alloc_milli = [MILLI_PER_GPU - int(self.free_milli[row, j]) if was[j] else 0 for j in range(g)]
        alloc_mib = [
            int(self.total_mib[row, j]) - int(self.free_mib[row, j]) if was[j] else 0 for j in range(g)
        ]
        alloc_cpu = int(self.total_cpu[row]) - int(self.free_cpu[row])
        alloc_mem = int(self.total_mem[row]) - int(self.free_mem[row])
        alloc_pods = int(self.total_pods[row]) - int(self.free_pods[row])
        alloc_scalar = self.total_scalar[row, :] - self.free_scalar[row, :]
        self.nodes[row] = node
        self._write_node(row, node, alloc_milli=(alloc_milli, alloc_mib, alloc_cpu, alloc_mem))
        self.free_pods[row] = int(self.free_pods[row]) - alloc_pods
        self.free_scalar[row, : alloc_scalar.shape[0]] -= alloc_scalar
        return row

    def _write_node(
        self, row: int, node: NodeInfo, *, alloc_milli: tuple[list[int], list[int], int, int] | None
    ) -> None:
        """Write the node's capacity; what pods hold is `alloc_milli` (GPUs, CPU, memory) and, for pod
        slots and other resources, subtracted by the caller (`update_node`)."""
        g = self.max_gpus
        milli_used, mib_used, cpu_used, mem_used = alloc_milli or ([0] * g, [0] * g, 0, 0)
        draining = self.draining.setdefault(row, set())
        for j in range(g):
            present = j < node.gpu_count
            was_present = bool(self.present[row, j])
            if not present and was_present and (milli_used[j] or mib_used[j]):
                # The GPU left the node's allocatable while pods hold it (a device plugin reporting it
                # unhealthy, a dip of the count): keep its holdings, take no new pod, retire it once free.
                draining.add(j)
                self.healthy[row, j] = False
                if 0 < node.gpu_memory_mib != int(self.total_mib[row, j]):  # known now, or measured now
                    self.total_mib[row, j] = self.report_free_mib[row, j] = node.gpu_memory_mib
                    self.free_mib[row, j] = node.gpu_memory_mib - mib_used[j]
                continue
            self.present[row, j] = present
            if present and (not was_present or j in draining):
                self.healthy[row, j] = j not in self.blocked.get(row, ())  # new, or back in the count
            elif not present:
                self.healthy[row, j] = False
            draining.discard(j)
            total = node.gpu_memory_mib if present else 0
            self.total_mib[row, j] = total
            self.free_milli[row, j] = (MILLI_PER_GPU - milli_used[j]) if present else 0
            self.free_mib[row, j] = (total - mib_used[j]) if present else 0
            self.report_free_mib[row, j] = total
        if not draining:
            del self.draining[row]
        self.total_cpu[row] = node.cpu_milli
        self.total_mem[row] = node.memory_mib
        self.free_cpu[row] = node.cpu_milli - cpu_used
        self.free_mem[row] = node.memory_mib - mem_used
        pods = UNLIMITED_PODS if node.pods is None else node.pods
        self.total_pods[row] = pods
        self.free_pods[row] = pods
        self.total_scalar[row, :] = 0
        for name, amount in node.scalars:
            col = self._scalar_column(name)  # may grow (replace) the matrices: before indexing them
            self.total_scalar[row, col] = amount

        self.free_scalar[row, :] = self.total_scalar[row, :]
        self.model[row] = self.models.code(node.gpu_model) if node.gpu_count else -1
        self.valid[row] = node.usable and not node.unschedulable
        self.cordoned[row] = node.usable and node.unschedulable
        self.label_matrix[row, :] = False
        for k, v in node.labels.items():
            col = self._column(self.labels, "label_matrix", f"{k}={v}")  # may grow (replace) the matrix
            self.label_matrix[row, col] = True
        self.taint_matrix[row, :] = False
        for taint in node.taints:  # every effect: PreferNoSchedule ones are scored, not filtered
            col = self._column(self.taints, "taint_matrix", taint.code)
            self.taint_matrix[row, col] = True
        for col, code in enumerate(self.domains.codes(node.labels)):
            self.domain[row, col] = code
        self.key_domains.write_row(row, node.labels)
        self.node_epoch += 1
        self._touch(row)

    def remove_node(self, name: str) -> None:
        row = self.node_index.pop(name, None)
        if row is None:
            return
        self.node_names[row] = None
        self.nodes[row] = None
        for arr in (self.free_milli, self.free_mib, self.total_mib, self.report_free_mib):
            arr[row, :] = 0
        self.present[row, :] = False
        self.healthy[row, :] = False
        for arr in (
            self.free_cpu,
            self.free_mem,
            self.total_cpu,
            self.total_mem,
            self.free_pods,
            self.total_pods,
        ):
            arr[row] = 0
        self.free_scalar[row, :] = 0
        self.total_scalar[row, :] = 0
        self.port_use[row, :] = 0
        self.valid[row] = False
        self.cordoned[row] = False
        self.model[row] = -1
        self.draining.pop(row, None)
        self.blocked.pop(row, None)
        self.domain[row, :] = -1
        self.key_domains.write_row(row, None)
        self._free_rows.append(row)
        self.node_epoch += 1
        self._touch(row)

    def key_codes(self, key: str) -> Any:
        """int32[C]: each row's domain code for node label `key` (-1: no such label); see key_domains.py."""
        found = self.key_domains.codes_by_key.get(key)
        if found is not None:
            return found
        return self.key_domains.codes(key, [n.labels if n is not None else None for n in self.nodes])

    def key_codes_host(self, key: str) -> list[int]:
        """`key_codes` as a host list (for lookups by row)."""
        found = self.key_domains.host_codes.get(key)
        if found is not None:
            return found
        self.key_codes(key)
        return self.key_domains.host_codes[key]

    def set_topologies(self, topologies: dict[str, tuple[str, ...]]) -> None:
        """Use these topologies (name -> node label keys, outermost first): every node's domain codes
        are recomputed from its labels (rare: a Topology object was created, changed or deleted)."""
        if not self.domains.configure(topologies):
            return
        self.domain = self.xp.full((self.capacity, self.domains.width), -1, dtype=self.xp.int32)
        self.node_epoch += 1  # the nodes' domains changed
        for row, node in enumerate(self.nodes):
            if node is None:
                continue
            for col, code in enumerate(self.domains.codes(node.labels)):
                self.domain[row, col] = code
            self._touch(row)

    def set_gpu_health(self, row: int, slot: int, healthy: bool) -> None:
        draining = slot in self.draining.get(row, ())
        blocked = slot in self.blocked.get(row, ())
        self.healthy[row, slot] = healthy and bool(self.present[row, slot]) and not draining and not blocked
        self._touch(row)

    def set_blocked(self, row: int, slots: set[int]) -> set[int]:
        """Row `row`'s GPUs `slots` take no new pod (running pods there are not all charged); the others
        are unblocked. Returns the slots unblocked, whose health the caller sets again (a node report)."""
        old = self.blocked.get(row, set())
        slots = {s for s in slots if s < self.max_gpus}
        if slots == old:
            return set()
        for slot in slots - old:
            self.healthy[row, slot] = False
        freed = old - slots
        for slot in freed:
            draining = slot in self.draining.get(row, ())
            self.healthy[row, slot] = bool(self.present[row, slot]) and not draining
        if slots:
            self.blocked[row] = set(slots)
        else:
            self.blocked.pop(row, None)
        self._touch(row)
        return freed

    def keep_slot(self, row: int, slot: int) -> None:
        """A pod holds GPU `slot`, which the node no longer counts (found so after a restart, during a dip of
        its GPU count): the slot is kept, draining, so the pod is accounted where it really is."""
        node = self.nodes[row]
        if node is None:
            return
        if slot >= self.max_gpus:
            self._grow_gpus(slot + 1)
        elif bool(self.present[row, slot]):
            return
        self.present[row, slot], self.healthy[row, slot] = True, False
        self.free_milli[row, slot] = MILLI_PER_GPU
        for arr in (self.total_mib, self.free_mib, self.report_free_mib):
            arr[row, slot] = node.gpu_memory_mib
        self.draining.setdefault(row, set()).add(slot)
        self._touch(row)

    def retire_drained(self) -> None:
        """Retire the draining slots nothing holds any more (the node has no such GPU). Called between
        cycles, never inside a transaction: a release rolled back must find its GPU again."""
        for row, draining in list(self.draining.items()):
            for slot in [s for s in draining if int(self.free_milli[row, s]) == MILLI_PER_GPU
                         and int(self.free_mib[row, s]) == int(self.total_mib[row, s])]:  # fmt: skip
                draining.discard(slot)
                self.present[row, slot], self.healthy[row, slot] = False, False
                for arr in (self.free_milli, self.free_mib, self.total_mib, self.report_free_mib):
                    arr[row, slot] = 0
                self._touch(row)
            if not draining:
                del self.draining[row]

    def set_reported_used(self, row: int, slot: int, used_mib: int) -> None:
        """NVML-measured use: free memory counts as the lower of accounting and the node report."""
        self.report_free_mib[row, slot] = max(0, int(self.total_mib[row, slot]) - used_mib)
        self._touch(row)

    # ------------------------------------------------------------------------------------- placements
    def share_for(self, row: int, slot: int, milli: int, mib: int) -> GPUShare:
        """The share one device of a pod takes on this GPU: milli and MiB each derived from the other."""
        total = int(self.total_mib[row, slot])
        need_milli = max(milli, -(-mib * MILLI_PER_GPU // total) if total and mib else 0)
        need_mib = max(mib, milli * total // MILLI_PER_GPU)
        return GPUShare(slot=slot, milli=min(need_milli, MILLI_PER_GPU), mib=min(need_mib, total))

    def write(self, placement: Placement, sign: int = 1) -> None:
        """Place (sign=+1) or release (-1) a placement, unjournalled. Refuses to over-commit anything."""
        row = placement.node
        cpu = int(self.free_cpu[row]) - sign * placement.cpu_milli
        mem = int(self.free_mem[row]) - sign * placement.memory_mib
        pods = int(self.free_pods[row]) - sign
        if sign > 0 and (cpu < 0 or mem < 0):
            raise OvercommitError(f"node {self.node_names[row]}: CPU or memory would be over-committed")
        if sign > 0 and pods < 0:
            raise OvercommitError(f"node {self.node_names[row]}: more pods than its allocatable pods")
        scalars = []
        for name, amount in placement.scalars:
            col = self._scalar_column(name)
            left = int(self.free_scalar[row, col]) - sign * amount
            if sign > 0 and left < 0:
                raise OvercommitError(f"node {self.node_names[row]}: {name} would be over-committed")
            scalars.append((col, left))
        updates = []
        for share in placement.gpus:
            s = share.slot
            if not bool(self.present[row, s]):
                raise OvercommitError(f"node {self.node_names[row]} has no GPU {s}")
            milli = int(self.free_milli[row, s]) - sign * share.milli
            mib = int(self.free_mib[row, s]) - sign * share.mib
            if milli < 0 or mib < 0:
                raise OvercommitError(f"node {self.node_names[row]} GPU {s} would be over-committed")
            if milli > MILLI_PER_GPU or mib > int(self.total_mib[row, s]):
                raise OvercommitError(f"node {self.node_names[row]} GPU {s} released more than placed")
            updates.append((s, milli, mib))
        for s, milli, mib in updates:
            self.free_milli[row, s] = milli
            self.free_mib[row, s] = mib
        self.free_cpu[row] = cpu
        self.free_mem[row] = mem
        self.free_pods[row] = pods
        for col, left in scalars:
            self.free_scalar[row, col] = left
        for code in placement.ports:
            col = self._column(self.ports, "port_use", code)
            self.port_use[row, col] = int(self.port_use[row, col]) + sign
        self._touch(row)

    def apply(self, placement: Placement, sign: int = 1) -> None:
        """`write`, journalled for `rollback`."""
        self.write(placement, sign)
        self._journal.append(_JournalEntry(placement, sign))

    def place(self, placement: Placement) -> None:
        self.apply(placement, +1)

    def release(self, placement: Placement) -> None:
        self.apply(placement, -1)

    # ------------------------------------------------------------------------------------ transaction
    def checkpoint(self) -> int:
        return len(self._journal)

    def rollback(self, checkpoint: int) -> None:
        while len(self._journal) > checkpoint:
            entry = self._journal.pop()
            if entry.placement is None:
                self.write_many(list(entry.batch), -entry.sign)
            else:
                self.write(entry.placement, -entry.sign)

    def commit(self) -> None:
        """Forget the journal: what was done stays done."""
        self._journal.clear()

    # ---------------------------------------------------------------------------------------- queries
    def row_of(self, name: str) -> int | None:
        return self.node_index.get(name)

    def gpu_capacity(self) -> int:
        """GPUs present on live nodes."""
        return int(self.xp.sum(self.xp.astype(self.present, self.xp.int64)))

    def allocated_milli(self) -> int:
        xp = self.xp
        used = xp.where(self.present, MILLI_PER_GPU - self.free_milli, xp.zeros_like(self.free_milli))
        return int(xp.sum(xp.astype(used, xp.int64)))

    def node_gpu_row(self, row: int) -> list[int]:
        """Free milli per GPU of one node (host ints, for reports and GPU choice)."""
        return [int(self.free_milli[row, j]) for j in range(self.max_gpus) if bool(self.present[row, j])]

    def host(self, arr: Any) -> Any:
        from scheduler.state.backend import to_numpy

        return to_numpy(arr)

    # ------------------------------------------------------------------------------------- row views
    def take_rows(self, rows: list[int]) -> RowView:
        """A read-only view of `rows` (in that order), sharing codebooks with this state."""
        return RowView(self, rows)

    # ------------------------------------------------------------------------------------ bulk updates
    def write_many(self, placements: list[Placement], sign: int = 1) -> None:
        """`write` for many placements at once (a relist, a burst of watch events): one array program
        instead of a few scalar writes each. All or nothing: raises OvercommitError, changing nothing,
        when any GPU, CPU or memory would leave [0, total] (callers then write one by one to find it)."""
        if not placements:
            return
        xp, shape = self.xp, (self.capacity, self.max_gpus)
        for pl in placements:  # every resource and port named has its column before the totals are made
            for name, _ in pl.scalars:
                self._scalar_column(name)
            for code in pl.ports:
                self._column(self.ports, "port_use", code)
        t = placement_totals(xp, placements, shape, self, int(self.free_scalar.shape[1]))
        d_milli, d_mib, d_cpu, d_mem, rows = t.milli, t.mib, t.cpu, t.mem, t.rows
        free_milli = xp.astype(self.free_milli, xp.int64) - sign * d_milli
        free_mib = self.free_mib - sign * d_mib
        free_cpu = self.free_cpu - sign * d_cpu
        free_mem = self.free_mem - sign * d_mem
        free_pods = self.free_pods - sign * t.pods
        free_scalar = self.free_scalar - sign * t.scalar
        used_cell = d_milli > 0
        bad = (
            xp.any(used_cell & ~self.present)
            | xp.any(free_milli < 0)
            | xp.any(free_mib < 0)
            | xp.any(free_milli > MILLI_PER_GPU)
            | xp.any(free_mib > self.total_mib)
            | (xp.any(free_cpu < 0) if sign > 0 else False)
            | (xp.any(free_mem < 0) if sign > 0 else False)
            | (xp.any((free_pods < 0) & (t.pods > 0)) if sign > 0 else False)
            | (xp.any((free_scalar < 0) & (t.scalar > 0)) if sign > 0 else False)
        )
        if bool(bad):
            raise OvercommitError(f"{len(placements)} placements at once would over-commit a node")
        self.free_milli = xp.astype(free_milli, self.free_milli.dtype)
        self.free_mib, self.free_cpu, self.free_mem = free_mib, free_cpu, free_mem
        self.free_pods, self.free_scalar = free_pods, free_scalar
        self.port_use = xp.astype(self.port_use + sign * t.port, self.port_use.dtype)
        for row in rows:
            self._touch(row)

    def apply_many(self, placements: list[Placement], sign: int = 1) -> None:
        """`write_many`, journalled for `rollback` as one entry."""
        self.write_many(placements, sign)
        if placements:
            self._journal.append(_JournalEntry(None, sign, tuple(placements)))
