"""The scheduler's view of the cluster, kept current from watch events.

Nodes live in the `ClusterState` arrays; pods, queues and pod groups in dicts. A pod holding resources is
accounted in the arrays exactly once: from its `tessera.dev/gpu-assignment` when it has one (ours), else
whole GPUs taken on its node's free slots (pods of other schedulers, NVIDIA's device plugin).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pydantic import ValidationError

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT, MILLI_PER_GPU
from scheduler.api.podgroup import PodGroup
from scheduler.api.queue import Queue
from scheduler.backend import ArrayNamespace
from scheduler.cluster import WatchEvent
from scheduler.gpu_identity import GPUIdentities
from scheduler.jobs import Job, build_job, is_job_member, job_key
from scheduler.model import GPUShare, NodeInfo, Placement, PodInfo, PodPhase
from scheduler.objects import InvalidObject, parse_node, parse_pod, pod_queue
from scheduler.placement.incremental import IncrementalPlacer
from scheduler.placement.policy import PlacementPolicy
from scheduler.reservations import Reservation, reservation_uid
from scheduler.state.cluster_state import ClusterState, OvercommitError
from scheduler.state.demand import PodDemand

log = logging.getLogger(__name__)


def one_line(exc: Exception) -> str:
    """A validation error as one readable line: "spec.resources.gpu: Value error, limit 2 is below quota 4"."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            parts.append(f"{where}: {err['msg']}" if where else err["msg"])
        return "; ".join(parts)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@dataclass
class Cache:
    state: ClusterState
    pods: dict[str, PodInfo] = field(default_factory=dict)  # by uid
    placements: dict[str, Placement] = field(default_factory=dict)  # uid -> what it holds
    queues: dict[str, Queue] = field(default_factory=dict)
    podgroups: dict[str, PodGroup] = field(default_factory=dict)  # namespace/name
    # Pods bound to a node the cache has not seen yet, by node name.
    awaiting_node: dict[str, set[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # objects we could not use, for the user
    # Planned places of pods being moved (charged in `state`, not in `placements`), by pod namespace/name.
    reservations: dict[str, Reservation] = field(default_factory=dict)
    # Each node's GPU UUIDs, memory and health, from its GPUNodeReport (the agent is their one source).
    gpu_identities: GPUIdentities = field(default_factory=GPUIdentities)
    # Since when each running gang (namespace/name) has been below minMember.
    stale_since: dict[str, float] = field(default_factory=dict)
    # Pod shapes consolidation found no plan for, with the fingerprint of the layout it tried.
    futile: dict[PodDemand, int] = field(default_factory=dict)
    # Jobs kept across cycles: a job is rebuilt only when one of its pods or its PodGroup changed, or
    # when it had pending pods (the actions work on those). Keys in first-seen order, as build_jobs.
    _members: dict[str, dict[str, PodInfo]] = field(default_factory=dict, init=False, repr=False)
    _jobs: dict[str, Job] = field(default_factory=dict, init=False, repr=False)
    _job_usage: dict[str, tuple[int, int, int]] = field(default_factory=dict, init=False, repr=False)
    _queue_usage: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False)
    _queue_usage_np: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False)
    # uids of the pods of non-preemptible jobs (kept by `jobs()`; read-only for everyone else)
    nonpreemptible: set[str] = field(default_factory=set, init=False, repr=False)
    _dirty: dict[str, None] = field(default_factory=dict, init=False, repr=False)
    _active: dict[str, None] = field(default_factory=dict, init=False, repr=False)
    _placer: IncrementalPlacer | None = field(default=None, init=False, repr=False)
    # Placements read from assignments during `apply`, written to the arrays in one go (see _flush).
    _deferred: dict[str, tuple[PodInfo, Placement]] = field(default_factory=dict, init=False, repr=False)
    _max_mem: int | None = field(default=None, init=False, repr=False)
    _max_mem_key: int = field(default=-1, init=False, repr=False)

    @classmethod
    def create(cls, xp: ArrayNamespace, *, max_gpus: int = 8, capacity: int = 64) -> Cache:
        return cls(state=ClusterState(xp, max_gpus=max_gpus, capacity=capacity))

    @property
    def xp(self) -> ArrayNamespace:
        return self.state.xp

    def placer(self, policy: PlacementPolicy) -> IncrementalPlacer:
        """The placer for `policy`, kept across cycles so its per-demand scores stay warm."""
        if self._placer is None or self._placer.policy is not policy or self._placer.state is not self.state:
            self._placer = IncrementalPlacer(self.state, policy)
        return self._placer

    # --------------------------------------------------------------------------------------- events
    def apply(self, events: list[WatchEvent]) -> None:
        for ev in events:
            try:
                if ev.kind != "Pod":
                    self._flush()
                handler = getattr(self, f"_on_{ev.kind.lower()}")
                handler(ev)
            except (InvalidObject, ValidationError, ValueError) as exc:
                name = (ev.obj.get("metadata") or {}).get("name", "?")
                msg = f"{ev.kind} {name}: {one_line(exc)}"
                log.warning("ignoring invalid object: %s", msg)
                self.errors.append(msg)
        self._flush()

    def _flush(self) -> None:
        """Write the deferred placements: in bulk, or one by one (with per-pod errors) if the bulk
        update refuses because one of them does not fit."""
        if not self._deferred:
            return
        items, self._deferred = list(self._deferred.items()), {}
        try:
            self.state.apply_many([pl for _, (_, pl) in items])
        except OvercommitError:
            for uid, (pod, pl) in items:
                try:
                    self.state.place(pl)
                except OvercommitError as exc:
                    self.errors.append(f"pod {pod.key}: {exc}")
                    continue
                self.placements[uid] = pl
            return
        for uid, (_, pl) in items:
            self.placements[uid] = pl

    def _on_node(self, ev: WatchEvent) -> None:
        name = str((ev.obj.get("metadata") or {}).get("name", ""))
        if ev.type == "DELETED":
            for uid, pl in list(self.placements.items()):
                if self.state.node_names[pl.node] == name:
                    del self.placements[uid]
                    if (gone := self.pods.get(uid)) is not None:
                        self._dirty[job_key(gone)] = None
            for key, res in list(self.reservations.items()):
                if self.state.node_names[res.placement.node] == name:
                    del self.reservations[key]
            self.state.remove_node(name)
            self.gpu_identities.forget(name)
            return
        node = self.gpu_identities.complete(parse_node(ev.obj), self.errors)
        row = self.state.row_of(node.name)
        if row is not None and self._shrinks_below_allocation(row, node):
            log.warning("node %s shrank below what is allocated on it; keeping old GPU layout", node.name)
        self.state.add_node(node)
        self.gpu_identities.measure(self.state, node.name)
        # Watches arrive in any order: pods bound here before we knew the node are accounted now.
        for uid in sorted(self.awaiting_node.pop(node.name, set())):
            pod = self.pods.get(uid)
            if (
                pod is not None
                and pod.holds_resources
                and pod.node == node.name
                and uid not in self.placements
            ):
                self._account_running(pod)

    def _shrinks_below_allocation(self, row: int, node: NodeInfo) -> bool:
        old = self.state.nodes[row]
        if old is not None and node.gpu_count >= old.gpu_count:
            return False  # the common update (labels, taints, a report): no need to scan placements
        return any(
            pl.node == row and any(s.slot >= node.gpu_count for s in pl.gpus)
            for pl in self.placements.values()
        )

    def _on_pod(self, ev: WatchEvent) -> None:
        if self._bind_echo(ev):
            return
        pod = parse_pod(ev.obj, max_gpu_memory_mib=self.max_gpu_memory_mib())
        if pod.uid in self._deferred:
            self._flush()  # this pod's earlier event must be in the arrays before this one is applied
        if ev.type == "DELETED":
            self.forget_pod(pod.uid)
            return
        self._index_pod(pod)
        self.pods[pod.uid] = pod
        if pod.holds_resources:
            if pod.uid not in self.placements:
                self._account_running(pod, defer=True)
        elif pod.uid in self.placements:
            self._release(pod.uid)

    def _bind_echo(self, ev: WatchEvent) -> bool:
        """The API's answer to our own bind (same pod, on the node we chose, now Running): update the phase
        in place instead of parsing the whole pod again. Anything else that changed takes the full path."""
        if ev.type != "MODIFIED":
            return False
        meta = ev.obj.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
        old = self.pods.get(uid)
        if old is None or old.phase != PodPhase.BOUND or uid not in self.placements:
            return False
        phase = str((ev.obj.get("status") or {}).get("phase") or "Pending")
        if (ev.obj.get("spec") or {}).get("nodeName") != old.node or phase not in ("Pending", "Running"):
            return False
        annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        if _without_assignment(annotations) != _without_assignment(old.annotations):
            return False
        if pod_queue({str(k): str(v) for k, v in (meta.get("labels") or {}).items()}) != old.queue:
            return False
        old.phase = PodPhase.RUNNING if phase == "Running" else PodPhase.BOUND
        old.annotations = annotations
        self._dirty[job_key(old)] = None
        return True

    def forget_pod(self, uid: str) -> None:
        for waiting in self.awaiting_node.values():
            waiting.discard(uid)
        old = self.pods.pop(uid, None)
        if old is not None:
            self._unindex_pod(old)
        if uid in self.placements:
            self._release(uid)

    # ----------------------------------------------------------------------------------------- jobs
    def _unindex_pod(self, pod: PodInfo) -> None:
        key = job_key(pod)
        self._dirty[key] = None
        members = self._members.get(key)
        if members is not None:
            members.pop(pod.uid, None)

    def _index_pod(self, pod: PodInfo) -> None:
        old = self.pods.get(pod.uid)
        if old is not None:
            self._unindex_pod(old)
        key = job_key(pod)
        self._dirty[key] = None
        if is_job_member(pod):
            self._members.setdefault(key, {})[pod.uid] = pod

    def jobs(self) -> list[Job]:
        """All jobs, as `build_jobs(self.pods.values(), self.podgroups)` gives them, rebuilding only the
        jobs whose pods changed or that have pending pods (settled jobs are reused as they are).
        Per-queue usage (all jobs, and non-preemptible jobs apart) and the uids of the pods of
        non-preemptible jobs are kept current along the way."""
        for key in list({**self._dirty, **self._active}):
            old = self._jobs.get(key)
            if old is not None:
                self._charge_queue(old, self._job_usage.pop(key, (0, 0, 0)), -1)
                if not old.preemptible:
                    self.nonpreemptible.difference_update(p.uid for p in (*old.running, *old.pending))
            members = self._members.get(key)
            if not members:
                self._members.pop(key, None)
                self._jobs.pop(key, None)
                self._active.pop(key, None)
                continue
            job = self._jobs[key] = build_job(key, list(members.values()), self.podgroups)
            gpu = cpu = mem = 0
            for p in job.running:
                pl = self.placements.get(p.uid)
                if pl is not None:
                    gpu += sum(g.milli for g in pl.gpus)
                    cpu += pl.cpu_milli
                    mem += pl.memory_mib
            self._job_usage[key] = (gpu, cpu, mem)
            self._charge_queue(job, (gpu, cpu, mem), +1)
            if not job.preemptible:
                self.nonpreemptible.update(p.uid for p in (*job.running, *job.pending))
            if job.pending:
                self._active[key] = None
            else:
                self._active.pop(key, None)
        self._dirty.clear()
        return list(self._jobs.values())

    def _charge_queue(self, job: Job, usage: tuple[int, int, int], sign: int) -> None:
        for book in (
            (self._queue_usage, self._queue_usage_np) if not job.preemptible else (self._queue_usage,)
        ):
            acc = book.setdefault(job.queue, [0, 0, 0])
            for i in range(3):
                acc[i] += sign * usage[i]

    def pending_jobs(self) -> list[Job]:
        """The jobs with pending pods, as of the last `jobs()`, in the same order as it returned them."""
        return [job for job in self._jobs.values() if job.pending]

    def queue_usage(self, *, nonpreemptible: bool = False) -> dict[str, tuple[int, int, int]]:
        """Per queue: (GPU milli, CPU milli, MiB) held by the running pods of its jobs (only of its
        non-preemptible jobs with `nonpreemptible`), as of `jobs()`."""
        book = self._queue_usage_np if nonpreemptible else self._queue_usage
        return {q: (u[0], u[1], u[2]) for q, u in book.items() if any(u)}

    def job_usage(self, key: str) -> tuple[int, int, int]:
        """(GPU milli, CPU milli, memory MiB) the running pods of job `key` held when `jobs()` ran."""
        return self._job_usage.get(key, (0, 0, 0))

    def _on_queue(self, ev: WatchEvent) -> None:
        q = Queue.model_validate(ev.obj)
        if ev.type == "DELETED":
            self.queues.pop(q.name, None)
        else:
            self.queues[q.name] = q

    def _on_podgroup(self, ev: WatchEvent) -> None:
        g = PodGroup.model_validate(ev.obj)
        key = f"{g.metadata.namespace or 'default'}/{g.metadata.name}"
        self._dirty[key] = None
        if ev.type == "DELETED":
            self.podgroups.pop(key, None)
        else:
            self.podgroups[key] = g

    def _on_gpunodereport(self, ev: WatchEvent) -> None:
        self.gpu_identities.on_report(self.state, ev.type, ev.obj)

    # ----------------------------------------------------------------------------------- accounting
    def max_gpu_memory_mib(self) -> int | None:
        # Asked for every pod event: recomputed only when a node was written since (O(nodes) each time).
        key = self.state.node_epoch
        if self._max_mem_key != key:
            mems = [n.gpu_memory_mib for n in self.state.nodes if n is not None and n.gpu_count]
            self._max_mem = max(mems) if mems else None
            self._max_mem_key = key
        return self._max_mem

    def assume(self, pod: PodInfo, placement: Placement) -> None:
        """Record a placement the scheduler made (already applied to the arrays)."""
        self.placements[pod.uid] = placement

    def unassume(self, uid: str) -> Placement | None:
        return self.placements.pop(uid, None)

    def reserve(self, res: Reservation) -> None:
        """Keep a planned place (already applied to the arrays). It is listed in `placements` too, under
        a key no pod has, so that the arrays always equal the sum of `placements`."""
        self.reservations[res.pod_key] = res
        self.placements[reservation_uid(res.pod_key)] = res.placement

    def drop_reservation(self, key: str) -> Reservation | None:
        """Forget a reservation and give its resources back."""
        res = self.reservations.pop(key, None)
        self.placements.pop(reservation_uid(key), None)
        if res is not None:
            try:
                self.state.release(res.placement)
            except OvercommitError as exc:
                log.error("release of reservation %s failed: %s", key, exc)
        return res

    def _release(self, uid: str) -> None:
        pl = self.placements.pop(uid)
        try:
            self.state.release(pl)
        except OvercommitError as exc:  # node changed under us; never let it stop the cache
            log.error("release of %s failed: %s", uid, exc)

    def _account_running(self, pod: PodInfo, *, defer: bool = False) -> None:
        assert pod.node is not None
        row = self.state.row_of(pod.node)
        if row is None:
            self.awaiting_node.setdefault(pod.node, set()).add(pod.uid)  # accounted when the node arrives
            return
        placement = self._placement_from_assignment(pod, row)
        if placement is not None and defer:
            self._deferred[pod.uid] = (pod, placement)
            return
        if placement is None:
            self._flush()  # finding free whole GPUs needs the arrays up to date
            placement = self._placement_from_request(pod, row)
        if placement is None:
            msg = f"pod {pod.key} runs on {pod.node} but its GPUs cannot be accounted there"
            log.warning(msg)
            self.errors.append(msg)
            return
        try:
            self.state.place(placement)
        except OvercommitError as exc:
            self.errors.append(f"pod {pod.key}: {exc}")
            return
        self.placements[pod.uid] = placement
        self._dirty[job_key(pod)] = None  # its job's usage changed (the node may have come after the pod)

    def _placement_from_assignment(self, pod: PodInfo, row: int) -> Placement | None:
        raw = pod.annotations.get(GPU_ASSIGNMENT)
        if not raw:
            return None
        try:
            a = GPUAssignment.from_annotation(raw)
        except ValueError as exc:
            self.errors.append(f"pod {pod.key}: {exc}")
            return None
        if a.node != pod.node:
            self.errors.append(f"pod {pod.key}: assignment names node {a.node} but it is bound to {pod.node}")
            return None
        shares = tuple(
            GPUShare(
                slot=g.index,
                milli=g.milli,
                mib=g.memory_mib or self.state.share_for(row, g.index, g.milli, 0).mib,
            )
            for g in a.gpus
        )
        return Placement(node=row, gpus=shares, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib)

    def _placement_from_request(self, pod: PodInfo, row: int) -> Placement | None:
        n = pod.request.num_devices if pod.request.kind == "whole" else 0
        if pod.error or pod.request.is_fractional:
            n = 0  # a fractional pod without an assignment was not placed by us: count no GPU share
        free = [
            j for j in range(self.state.max_gpus)
            if bool(self.state.present[row, j]) and int(self.state.free_milli[row, j]) == MILLI_PER_GPU
        ]  # fmt: skip
        if len(free) < n:
            return None
        shares = tuple(GPUShare(j, MILLI_PER_GPU, int(self.state.total_mib[row, j])) for j in free[:n])
        return Placement(node=row, gpus=shares, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib)


def _without_assignment(annotations: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if k != GPU_ASSIGNMENT}
