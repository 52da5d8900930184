"""The world the property tests play in: a simulated cluster that records every bind, the operations a user,
an operator or a kubelet may perform on it, and the invariants checked after every cycle, computed from
scratch from what the cluster runs (never from the scheduler's own books).

Operations are plain tuples drawn by hypothesis (`tests/property/test_operation_sequences.py`); `World.do`
applies one, `World.cycle` runs the real scheduling cycle and checks:

- no GPU over 1000 milli or over its memory, and the scheduler's arrays equal to the pods that run, GPU by
  GPU, CPU and memory by node;
- no partial gang: a gang bound in a cycle runs at least minMember members (a running pod counts in the
  gang it was bound in, whatever its annotation says since);
- no queue limit exceeded by a bind (a pod counts in the queue it was admitted to, or in `default` once
  that queue is gone: relabelling a running pod, annotating it into another group or editing its
  PodGroup does not move it), pods being deleted counted until they are gone;
- no double bind: the scheduler never binds a pod that is bound;
- every pending pod of Tessera's is told why it waits;
- in the reclaim world (`reclaim=True`: finite quotas that the cluster holds, whole-GPU pods): a queue
  below its quota gets a pending pod of one GPU within RECLAIM_WITHIN_S (and RECLAIM_WITHIN_CYCLES cycles),
  whatever its victims' owners did: budgets, long grace periods, PodGroups made non-preemptible, pods moved
  between groups (counted from the last restart: a fresh scheduler re-plans pipelined pods, whose places
  were the old one's memory).

Restarts replace the scheduler by a fresh one that lists the world's objects in some order (`relist`),
nodes without GPU memory labels get their memory from a GPUNodeReport, pods carry sidecars, long grace
periods and PodDisruptionBudgets.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.assignment import GPUAssignment
from scheduler.api.gpu_request import GPURequest
from scheduler.api.keys import (
    GPU_ASSIGNMENT,
    GPU_FRACTION,
    GPU_FRACTION_NUM_DEVICES,
    GPU_MEMORY,
    GPU_MEMORY_LABEL,
    POD_GROUP,
    QUEUE_LABEL,
    SIM_DURATION,
    WHOLE_GPU_RESOURCE,
)
from scheduler.cache.cluster import BindResult
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.framework.eviction import EvictionPolicy
from scheduler.model.jobs import job_facts
from scheduler.model.parse import cpu_milli, memory_mib
from scheduler.model.types import PodInfo
from scheduler.sim.builtin import node, pod, podgroup, queue
from scheduler.sim.cluster import RELIST_ORDER, SIM_RECREATE, SimCluster
from scheduler.state.bulk import arrays_agree
from tests.framework.helpers import assert_arrays_match_world

Op = tuple[Any, ...]
MODELS = {"A100": 40960, "H100": 81920, "T4": 15360}
# (name, parent): `org` is a parent queue (pods go to its leaves), `ghost` never exists.
QUEUES = (("default", None), ("org", None), ("a", "org"), ("b", "org"), ("c", None))
LEAVES = ("default", "a", "b", "c")
# Values no one should write (the parser bounds them; a value that slips through is contained).
HOSTILE = ("nan", "-1", "0", "1e99999", "9" * 4000, "9" * 19, "٠.٥", "1_000", "abc", "", "0.5\x00")
# The orders a restarted scheduler may see the world in: the adapter's, pods first, reports last.
ORDERS: tuple[tuple[str, ...], ...] = (
    RELIST_ORDER,
    ("Pod", "Node", "PriorityClass", "Queue", "PodGroup", "GPUNodeReport", "Topology"),
    ("Node", "PriorityClass", "Queue", "PodGroup", "Topology", "Pod", "GPUNodeReport"),
)
GRACES = (None, 600, 1_000_000)  # terminationGracePeriodSeconds of a submitted pod (None: Kubernetes' 30 s)
APPS = ("web", "etl", "ml")  # pods are labelled app=<one of these>: what budgets select
PRIORITIES = ("train", "build", "inference")
# The reclaim world: a queue below its quota whose pod of one GPU is pending gets it within this long.
RECLAIM_QUOTAS = {"default": 0, "org": 4, "a": 2, "b": 2, "c": 2}  # leaves: 6 of the 8 GPUs
# Two victims' capped grace periods (30 s each) and a few cycles: pods pipelined for another queue before it
# asked are no victims until they are bound (their places are not taken back: KAI can unallocate a
# Pipelined victim), so it may wait for their victims to terminate, and then for its own.
RECLAIM_WITHIN_S = 75.0
RECLAIM_WITHIN_CYCLES = 5
# A gpu-memory pod is charged its largest possible share before placement (queues/charge.py), so a queue
# a memory pod was bound into is checked against its limit like any other (False skips those checks).
CHECK_LIMITS_WITH_MEMORY_PODS = True


class RecordingSim(SimCluster):
    """The simulated cluster, recording every bind (and any attempt to bind a pod that is bound)."""

    def __init__(self) -> None:
        super().__init__()
        self.binds: list[tuple[str, GPUAssignment]] = []
        self.double_binds: list[str] = []

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> BindResult:
        rec = self.pods.get(pod.key)
        if rec is not None and rec.obj["metadata"].get("uid") == pod.uid and rec.obj["spec"].get("nodeName"):
            self.double_binds.append(
                f"{pod.key} bound to {rec.obj['spec']['nodeName']}, again to {assignment.node}"
            )
        result = super().bind(pod, assignment)
        self.binds.append((pod.key, assignment))
        return result


@dataclass
class Stats:
    sequences: int = 0
    cycles: int = 0
    operations: Counter[str] = field(default_factory=Counter)
    binds: int = 0
    limit_checks: int = 0
    limit_checks_skipped: int = 0  # see CHECK_LIMITS_WITH_MEMORY_PODS
    restarts: int = 0
    reclaim_checks: int = 0  # (pending pod, cycle) pairs of a queue below its quota, in the reclaim world
    reclaimed_in_time: int = 0  # such pods bound, each within RECLAIM_WITHIN_S

    def as_dict(self) -> dict[str, Any]:
        return {
            "sequences": self.sequences, "cycles": self.cycles, "operations": sum(self.operations.values()),
            "by_operation": dict(sorted(self.operations.items())), "binds": self.binds,
            "limit_checks": self.limit_checks, "limit_checks_skipped": self.limit_checks_skipped,
            "restarts": self.restarts, "reclaim_checks": self.reclaim_checks,
            "reclaimed_in_time": self.reclaimed_in_time,
        }  # fmt: skip


def request_annotations(kind: tuple[str, str, int]) -> tuple[dict[str, str], int]:
    """(annotations, whole GPUs) of a request kind: fraction, memory, whole, cpu."""
    name, value, n = kind
    if name == "fraction":
        return {GPU_FRACTION: value, GPU_FRACTION_NUM_DEVICES: str(n)}, 0
    if name == "memory":
        return {GPU_MEMORY: value, GPU_FRACTION_NUM_DEVICES: str(n)}, 0
    if name == "whole":
        return {}, n
    return {}, 0


def gpu_report(name: str, model: str, gpus: int) -> dict[str, Any]:
    """What a node agent publishes for `gpus` GPUs of `model` (the node's memory, for a node without the
    GPU Feature Discovery label)."""
    return {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "GPUNodeReport", "metadata": {"name": name},
            "spec": {"node": name, "observedAt": "2026-01-01T00:00:00Z",
                     "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": model, "memoryTotalMiB": MODELS[model]}
                              for i in range(gpus)]}}  # fmt: skip


def requested(obj: dict[str, Any]) -> tuple[int, int]:
    """(CPU milli, memory MiB) a pod of the world takes on its node: its container and its sidecars (the
    world's pods have no other init containers)."""
    spec = obj["spec"]
    cpu = mem = 0
    for c in [*spec["containers"], *spec.get("initContainers", [])]:
        r = c["resources"]["requests"]
        cpu, mem = cpu + cpu_milli(r["cpu"]), mem + memory_mib(r["memory"])
    return cpu, mem


class World:
    def __init__(
        self,
        nodes: list[tuple[str, int]],
        limits: dict[str, float],
        stats: Stats,
        *,
        unlabelled: frozenset[int] = frozenset(),
        budgets: str = "delete",
        reclaim: bool = False,
    ) -> None:
        """`unlabelled`: indexes of nodes without GPU memory labels (their GPUNodeReport says it);
        `budgets`: what a refusing PodDisruptionBudget means (--disruption-budgets); `reclaim`: the reclaim
        world (finite quotas, RECLAIM_QUOTAS; the reclaim guarantee checked every cycle)."""
        self.sim = RecordingSim()
        self.stats = stats
        self.reclaim = reclaim
        self.node_objs: dict[str, dict[str, Any]] = {}
        for i, (model, gpus) in enumerate(nodes):
            obj = node(f"n{i}", (model, MODELS[model]), gpus, 64, 512)
            if i in unlabelled:
                del obj["metadata"]["labels"][GPU_MEMORY_LABEL]
                self.sim.add_object("GPUNodeReport", gpu_report(f"n{i}", model, gpus))
            self.node_objs[obj["metadata"]["name"]] = obj
            self.sim.add_object("Node", copy.deepcopy(obj))
        self.queue_objs: dict[str, dict[str, Any]] = {}
        for name, parent in QUEUES:
            quota = RECLAIM_QUOTAS[name] if reclaim else -1
            self.queue_objs[name] = queue(name, parent, quota, limit=limits.get(name, -1))
            self.sim.add_object("Queue", copy.deepcopy(self.queue_objs[name]))
        self.live_queues = set(self.queue_objs)
        self.groups: dict[str, int] = {}  # namespace/name -> minMember, of valid PodGroups that exist
        self.group_queue: dict[str, str] = {}  # namespace/name -> the queue its PodGroup names
        self.admitted: dict[str, str] = {}  # running pod key -> the queue it counts in
        self.leaving: dict[str, str] = {}  # pods being deleted -> the queue they counted in (its limit still)
        self.bound_group: dict[str, str | None] = {}  # running pod key -> the group it was bound in
        self.bound_uid: dict[str, str] = {}  # running pod key -> its uid (a recreated pod is another one)
        self.owed: dict[str, tuple[float, int]] = {}  # reclaim world: pending pod -> (since, cycles)
        self.forgotten: set[str] = set()  # nodes deleted before the scheduler (re)started: unknown to it
        self.restarted_s = 0.0  # when the scheduler last started afresh
        self.seq = 0
        self.config = SchedulerConfig(backend="numpy", expected_nodes=8,
                                      eviction=EvictionPolicy(budgets="respect" if budgets == "respect" else "delete"))  # fmt: skip
        self.sched = Scheduler(self.sim, self.config)
        if (
            reclaim
        ):  # the cluster lent whole to `default` (quota 0): every pod of a queue below quota reclaims
            gpus = sum(int(obj["status"]["capacity"][WHOLE_GPU_RESOURCE]) for obj in self.node_objs.values())
            for _ in range(gpus):
                self._submit(("whole", "", 1), "default", "train", 0)

    # ------------------------------------------------------------------------------------ operations
    def do(self, op: Op) -> None:
        kind = op[0]
        self.stats.operations[kind] += 1
        getattr(self, f"_{kind}")(*op[1:])

    def _submit(
        self, request: tuple[str, str, int], leaf: str, priority: str, duration: int, grace: int | None = None,
        sidecar: bool = False,
    ) -> None:  # fmt: skip
        ann, whole = request_annotations(request)
        self.seq += 1
        obj = pod(f"p{self.seq}", leaf, arrival_s=0, duration_s=duration, cpu="2", memory="4Gi",
                  annotations=ann, gpus=whole, priority_class=priority, grace_s=grace)  # fmt: skip
        obj["metadata"]["namespace"] = "ns"
        obj["metadata"]["labels"]["app"] = APPS[self.seq % len(APPS)]
        if sidecar:  # a proxy beside the app container, as an init container that keeps running
            obj["spec"]["initContainers"] = [{"name": "proxy", "image": "proxy", "restartPolicy": "Always",
                                              "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]  # fmt: skip
        if leaf == "default":
            del obj["metadata"]["labels"][QUEUE_LABEL]
        if duration == 0:
            del obj["metadata"]["annotations"][SIM_DURATION]  # runs until deleted
        self.sim.submit_pod(obj)

    def _gang(self, request: tuple[str, str, int], leaf: str, min_member: int, extra: int) -> None:
        ann, whole = request_annotations(request)
        self.seq += 1
        name = f"g{self.seq}"
        self.sim.add_object("PodGroup", podgroup(name, "ns", leaf, min_member))
        self.groups[f"ns/{name}"] = min_member
        self.group_queue[f"ns/{name}"] = leaf
        for w in range(max(1, min_member + extra)):  # extra -1: one member short (incomplete)
            obj = pod(f"{name}-{w}", leaf, arrival_s=0, duration_s=60, cpu="2", memory="4Gi",
                      annotations={**ann, POD_GROUP: name}, gpus=whole)  # fmt: skip
            obj["metadata"]["namespace"] = "ns"
            self.sim.submit_pod(obj)

    def _pick(self, index: int, *, running: bool | None = None) -> str | None:
        keys = sorted(
            k for k, r in self.sim.pods.items()
            if r.obj["metadata"].get("uid")
            and (running is None or bool(r.obj["spec"].get("nodeName")) == running)
            and (r.obj.get("status") or {}).get("phase") in ("Pending", "Running")
        )  # fmt: skip
        return keys[index % len(keys)] if keys else None

    def _delete(self, index: int, recreate: bool) -> None:
        key = self._pick(index)
        if key is None:
            return
        rec = self.sim.pods[key]
        rec.obj["metadata"].setdefault("annotations", {})[SIM_RECREATE] = "true" if recreate else "false"
        uid = rec.obj["metadata"]["uid"]
        info = self.sched.cache.pods.get(uid) or PodInfo(
            uid, "ns", key.split("/")[1], "", 0, True, GPURequest()
        )
        # A user's deletion takes the pod's own grace period and asks no budget (a force). In the reclaim
        # world it is quick: a pod its user keeps terminating for days holds its GPU for everyone.
        self.sim.evict(info, action="user", message="deleted by the user", force=True,
                       grace_s=1 if self.reclaim else None)  # fmt: skip

    def _relabel(self, index: int, running: bool, leaf: str) -> None:
        key = self._pick(index, running=running)
        if key is None:
            return
        obj = copy.deepcopy(self.sim.pods[key].obj)
        if not isinstance(obj["metadata"].get("labels"), dict):
            obj["metadata"]["labels"] = {}
        obj["metadata"]["labels"][QUEUE_LABEL] = leaf
        self.sim.update_object("Pod", obj)

    def _hostile(self, index: int, running: bool, key_index: int, value_index: int) -> None:
        key = self._pick(index, running=running)
        if key is None:
            return
        obj = copy.deepcopy(self.sim.pods[key].obj)
        annotation = (GPU_FRACTION, GPU_MEMORY, GPU_FRACTION_NUM_DEVICES, "labels")[key_index % 4]
        value = HOSTILE[value_index % len(HOSTILE)]
        if annotation == "labels":
            obj["metadata"]["labels"] = [value]  # not a map
        else:
            obj["metadata"].setdefault("annotations", {})[annotation] = value
        self.sim.update_object("Pod", obj)

    def _node_delete(self, index: int) -> None:
        names = sorted(self.sim.nodes)
        if names:
            self.sim.delete_object("Node", self.sim.nodes[names[index % len(names)]])

    def _node_add(self, index: int, gpus: int | None) -> None:
        """A node (re-)registers: with its own GPU count, or `gpus` (a dip or a return)."""
        name = sorted(self.node_objs)[index % len(self.node_objs)]
        self.forgotten.discard(name)
        obj = copy.deepcopy(self.node_objs[name])
        if gpus is not None:
            obj["status"]["capacity"][WHOLE_GPU_RESOURCE] = str(gpus)
        if name in self.sim.nodes:
            self.sim.update_object("Node", obj)
        else:
            self.sim.add_object("Node", obj)

    def _queue_edit(self, name: str, limit: float) -> None:
        obj = copy.deepcopy(self.queue_objs[name])
        obj["spec"]["resources"]["gpu"]["limit"] = limit
        self.queue_objs[name] = obj
        if name in self.live_queues:
            self.sim.update_object("Queue", copy.deepcopy(obj))
        else:
            self.live_queues.add(name)
            self.sim.add_object("Queue", copy.deepcopy(obj))

    def _queue_delete(self, name: str) -> None:
        if name in self.live_queues:
            self.live_queues.discard(name)
            self.sim.delete_object("Queue", self.queue_objs[name])
            for key, q in self.admitted.items():
                if q == name:
                    self.admitted[key] = "default"  # what it holds counts in `default` from now on
            for key in [k for k, q in self.leaving.items() if q == name]:
                del self.leaving[key]  # it counts in no queue's limit any more

    def _group_edit(
        self, index: int, min_member: int, leaf: str | None = None, priority: str | None = None,
        preemptibility: str | None = None,
    ) -> None:  # fmt: skip
        """A PodGroup edited (its pods running or not): minMember, and its queue, priority class or
        preemptibility (the webhook refuses the last three while its pods run; the scheduler keeps what a
        running gang was admitted with)."""
        names = sorted(self.groups)
        if not names:
            return
        key = names[index % len(names)]
        ns, name = key.split("/")
        self.groups[key] = min_member
        if leaf is not None:
            self.group_queue[key] = leaf
        obj = podgroup(name, ns, self.group_queue[key], min_member)
        if priority is not None:
            obj["spec"]["priorityClassName"] = priority
        if preemptibility is not None:
            obj["spec"]["preemptibility"] = preemptibility
        self.sim.update_object("PodGroup", obj)

    def _regroup(self, index: int, running: bool, group_index: int | None) -> None:
        """A pod annotated into another group (None: out of any): a running one stays in the job it was
        bound in (the webhook refuses it), a pending one moves."""
        key = self._pick(index, running=running)
        names = sorted(self.groups)
        if key is None:
            return
        obj = copy.deepcopy(self.sim.pods[key].obj)
        annotations = obj["metadata"].setdefault("annotations", {})
        if group_index is None or not names:
            annotations.pop(POD_GROUP, None)
        else:
            annotations[POD_GROUP] = names[group_index % len(names)].split("/")[1]
        self.sim.update_object("Pod", obj)

    def _pdb(self, app: int, min_available: int | None, max_unavailable: int | None) -> None:
        """A tenant's PodDisruptionBudget over its pods labelled app=<APPS[app]>."""
        name = APPS[app % len(APPS)]
        spec: dict[str, Any] = {"selector": {"matchLabels": {"app": name}}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        else:
            spec["maxUnavailable"] = max_unavailable or 0
        self.sim.add_budget({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                             "metadata": {"name": f"pdb-{name}", "namespace": "ns"}, "spec": spec})  # fmt: skip

    def _restart(self, order: int) -> None:
        """The scheduler dies; a fresh one lists the world's objects (in one of ORDERS)."""
        self.stats.restarts += 1
        self.restarted_s = self.sim.now_s
        self.forgotten |= {name for name in self.node_objs if name not in self.sim.nodes}
        self.sched = Scheduler(self.sim, self.config)
        self.sim.relist(ORDERS[order % len(ORDERS)])  # type: ignore[arg-type]

    def _tick(self, seconds: int) -> None:
        self.sim.advance(self.sim.now_s + seconds)

    # ---------------------------------------------------------------------------------------- cycle
    def cycle(self) -> None:
        before = len(self.sim.binds)
        self.sim.advance(self.sim.now_s + 1)
        result = self.sched.run_cycle()
        self.stats.cycles += 1
        new = self.sim.binds[before:]
        self.stats.binds += len(new)
        assert not self.sim.double_binds, self.sim.double_binds
        self._forget_finished()
        for key, _ in new:
            self.leaving.pop(key, None)  # an earlier pod of that name (its controller recreated it)
            self.bound_group.pop(key, None)
            self.bound_uid[key] = self.sim.pods[key].obj["metadata"]["uid"]
            self.admitted[key] = self._queue_of(key)
            self.bound_group[key] = self._group_of(key)
            assert self.admitted[key] in self.live_queues, f"{key} bound into queue {self.admitted[key]}"
        assert_arrays_match_world(self.sim, self.sched, frozenset(self.forgotten))
        ledger = self.sched.cache.ledger
        holdings = [h.placement for h in (*ledger.pods.values(), *ledger.reserved.values())]
        assert arrays_agree(ledger.state, holdings)  # the check a contained failure is followed by
        self._check_cpu_memory()
        self._check_jobs()
        self._check_gangs(new)
        self._check_limits(new)
        self._check_told(result.reasons)
        if self.reclaim:
            self._check_reclaim()

    def _bound(self, key: str) -> Any:
        """The pod of that name that was bound (None: gone, or replaced by a new one of the same name)."""
        rec = self.sim.pods.get(key)
        return rec if rec is not None and rec.obj["metadata"].get("uid") == self.bound_uid.get(key) else None

    def _group_of(self, key: str) -> str | None:
        """The group a pod is in: the one it was bound in while it runs, else its annotation's."""
        if key in self.bound_group:
            return self.bound_group[key]
        return (self.sim.pods[key].obj["metadata"].get("annotations") or {}).get(POD_GROUP)

    def _queue_of(self, key: str) -> str:
        """The queue a pod bound now counts in, from what the world says: the queue its gang's running
        members count in (as they were admitted), else its PodGroup's, else its label's (none: `default`)."""
        meta = self.sim.pods[key].obj["metadata"]
        group = (meta.get("annotations") or {}).get(POD_GROUP)
        if group is not None:
            members = [k for k in self.admitted if self.bound_group.get(k) == group and k != key]
            if members:
                return self.admitted[members[0]]
            return self.group_queue[f"ns/{group}"]
        labels = meta.get("labels")
        return (labels.get(QUEUE_LABEL) if isinstance(labels, dict) else None) or "default"

    def _forget_finished(self) -> None:
        """Pods no longer counted in their queue: finished or gone; those being deleted still count toward
        its limit until they are gone (`leaving`)."""
        for key in list(self.admitted):
            rec = self._bound(key)
            if rec is None or (rec.obj.get("status") or {}).get("phase") != "Running":
                del self.admitted[key]
                self.bound_group.pop(key, None)
            elif rec.obj["metadata"].get("deletionTimestamp"):
                self.leaving[key] = self.admitted.pop(key)
        for key in list(self.leaving):
            rec = self._bound(key)
            if rec is None or (rec.obj.get("status") or {}).get("phase") != "Running":
                del self.leaving[key]
                self.bound_group.pop(key, None)

    def _running(self, *, terminating: bool = True) -> list[dict[str, Any]]:
        """Pods that run; `terminating=False` leaves out those being deleted (evicted victims in their grace
        period: still on their node, out of the plan and of their queue's usage, as in KAI)."""
        return [r.obj for r in self.sim.pods.values()
                if r.obj["spec"].get("nodeName") and (r.obj.get("status") or {}).get("phase") == "Running"
                and (terminating or not r.obj["metadata"].get("deletionTimestamp"))]  # fmt: skip

    def _check_jobs(self) -> None:
        """The job index rebuilds a job only when told something of it changed (its pods, its PodGroup, its
        queue, its members' places): every job it will not rebuild next cycle is as a rebuild would make
        it: the cache's current pods as members, and listed with the pending jobs exactly when some member
        has no place in the ledger."""
        index, ledger = self.sched.cache.index, self.sched.cache.ledger
        for key, job in index._jobs.items():
            if key in index._dirty or key in index.quarantined:
                continue
            members = {p.uid: p for p in index._members.of(key)}
            assert {p.uid: p for p in job.members} == members, f"job {key}: members not rebuilt"
            assert all(members[p.uid] is p for p in job.members), f"job {key}: an old version of a member"
            unplaced = bool(job_facts(job, ledger).unplaced)
            assert unplaced == (key in index._active), (
                f"job {key}: pending {key in index._active}, should be {unplaced}"
            )

    def _check_cpu_memory(self) -> None:
        state = self.sched.cache.state
        cpu: Counter[str] = Counter()
        mem: Counter[str] = Counter()
        for obj in self._running(terminating=False):
            c, m = requested(obj)
            cpu[obj["spec"]["nodeName"]] += c
            mem[obj["spec"]["nodeName"]] += m
        on_node: Counter[str] = Counter()  # what is physically there: victims still terminating too
        for obj in self._running():
            on_node[obj["spec"]["nodeName"]] += requested(obj)[0]
        for held in self.sched.cache.ledger.reserved.values():  # places kept for pods being moved
            where = str(state.node_names[held.placement.node])
            cpu[where] += held.placement.cpu_milli
            mem[where] += held.placement.memory_mib
        for row, name in enumerate(state.node_names):
            if name is None:
                continue
            assert int(state.free_cpu[row]) == int(state.total_cpu[row]) - cpu[name], f"node {name} CPU"
            assert int(state.free_mem[row]) == int(state.total_mem[row]) - mem[name], f"node {name} memory"
            assert cpu[name] <= int(state.total_cpu[row]) and mem[name] <= int(state.total_mem[row])
            assert on_node[name] <= int(state.total_cpu[row]), f"node {name} CPU over-committed"

    def _check_gangs(self, new: list[tuple[str, GPUAssignment]]) -> None:
        bound_groups = {self._group_of(k) for k, _ in new}
        running = Counter(
            self._group_of(key) for key, rec in self.sim.pods.items()
            if rec.obj["spec"].get("nodeName") and (rec.obj.get("status") or {}).get("phase") == "Running"
        )  # fmt: skip
        for rec in self.sim.pods.values():  # members that succeeded count toward minMember (as in KAI)
            if (rec.obj.get("status") or {}).get("phase") == "Succeeded":
                running[(rec.obj["metadata"].get("annotations") or {}).get(POD_GROUP)] += 1
        for pod_key in self.sched.cache.ledger.reserved:  # pipelined members: bound once their victims go
            rec = self.sim.pods.get(pod_key)
            if rec is not None and not rec.obj["spec"].get("nodeName"):
                running[(rec.obj["metadata"].get("annotations") or {}).get(POD_GROUP)] += 1
        for group in bound_groups - {None}:
            key = f"ns/{group}"
            if key in self.groups:  # a gang with its PodGroup: never started below minMember
                assert running[group] >= self.groups[key], (
                    f"gang {key} runs {running[group]} of {self.groups[key]} (members that succeeded or "
                    "have a place reserved counted)"
                )

    def _check_limits(self, new: list[tuple[str, GPUAssignment]]) -> None:
        usage: Counter[str] = Counter()
        memory_pods: set[str] = set()
        for key, q in (*self.admitted.items(), *self.leaving.items()):  # being deleted: still on its GPUs
            raw = self.sim.pods[key].obj["metadata"]["annotations"].get(GPU_ASSIGNMENT)
            if raw is None:
                continue  # CPU only
            a = GPUAssignment.from_annotation(raw)
            if a.node in self.forgotten:
                # Known limitation: a scheduler started while this Node object was deleted (its pods still
                # running) charges them again only once the node registers again or they are gone.
                continue
            for name in self._chain(q):
                usage[name] += sum(g.milli for g in a.gpus)
        for key, _ in new:
            if GPU_MEMORY in (self.sim.pods[key].obj["metadata"].get("annotations") or {}):
                memory_pods.update(self._chain(self.admitted[key]))
        for name in {n for key, _ in new for n in self._chain(self.admitted[key])}:
            limit = self.queue_objs[name]["spec"]["resources"]["gpu"]["limit"]
            if limit < 0 or name not in self.live_queues:
                continue
            if name in memory_pods and not CHECK_LIMITS_WITH_MEMORY_PODS:
                self.stats.limit_checks_skipped += 1
                continue
            self.stats.limit_checks += 1
            assert usage[name] <= limit * 1000, (
                f"queue {name} holds {usage[name]} milli over its limit {limit}"
            )

    def _chain(self, q: str) -> list[str]:
        parent = dict(QUEUES).get(q)
        return [q] + ([parent] if parent and parent in self.live_queues else [])

    def _check_told(self, reasons: dict[str, Any]) -> None:
        """Every pending pod of ours that the cycle saw is told why it waits."""
        seen = self.sched.cache.pods
        for rec in self.sim.pods.values():
            meta, spec = rec.obj["metadata"], rec.obj["spec"]
            if meta.get("uid") not in seen or spec.get("nodeName") or spec.get("schedulerName") != "tessera":
                continue
            assert rec.reason is not None or meta["uid"] in reasons, f"{meta['name']} pending, told nothing"

    # ------------------------------------------------------------------------------- reclaim guarantee
    def _asks(self, key: str) -> tuple[str, int, bool]:
        """(queue, whole GPUs, preemptible) of a pending pod of the reclaim world, from its object."""
        obj = self.sim.pods[key].obj
        labels = obj["metadata"].get("labels") if isinstance(obj["metadata"].get("labels"), dict) else {}
        gpus = int(obj["spec"]["containers"][0]["resources"]["limits"].get(WHOLE_GPU_RESOURCE, 0))
        return labels.get(QUEUE_LABEL) or "default", gpus, obj["spec"].get("priorityClassName") == "train"

    def _check_reclaim(self) -> None:
        """A queue below its quota gets a pending pod of one GPU within RECLAIM_WITHIN_S (and
        RECLAIM_WITHIN_CYCLES cycles): the cluster holds every quota (RECLAIM_QUOTAS), non-preemptible
        pods only run within quota, and every other pod may be reclaimed, whatever its owner did."""
        now = self.sim.now_s
        used: Counter[str] = Counter()  # GPUs of the pods counted in each queue (all whole GPUs here)
        held_np: Counter[str] = Counter()  # of them, non-preemptible
        for key, q in self.admitted.items():
            spec = self.sim.pods[key].obj["spec"]
            gpus = int(spec["containers"][0]["resources"]["limits"].get(WHOLE_GPU_RESOURCE, 0))
            used[q] += gpus
            if spec.get("priorityClassName") != "train":
                held_np[q] += gpus
        # Pods placed already, bound once the pods they wait for are gone (pipelined), hold their queue's
        # quota too: their places are planned.
        planned = {k for k in self.sched.cache.ledger.reserved if k in self.sim.pods}
        for key in planned:
            q, gpus, preemptible = self._asks(key)
            used[q] += gpus
            held_np[q] += 0 if preemptible else gpus
        owed: set[str] = set()
        for key, rec in self.sim.pods.items():
            meta, spec = rec.obj["metadata"], rec.obj["spec"]
            if not meta.get("uid") or spec.get("nodeName") or POD_GROUP in (meta.get("annotations") or {}):
                continue
            q, gpus, preemptible = self._asks(key)
            quota = RECLAIM_QUOTAS.get(q, 0)
            mine = gpus if key in planned else 0  # its own planned place does not count against it
            np = held_np[q] - (0 if preemptible else mine)
            if gpus == 1 and used[q] - mine + 1 <= quota and (preemptible or np + 1 <= quota):
                owed.add(key)
        for key in list(self.owed):
            if key not in owed:
                rec = self.sim.pods.get(key)
                self.stats.reclaimed_in_time += rec is not None and bool(rec.obj["spec"].get("nodeName"))
                del self.owed[key]
        for key in owed:
            since, cycles = self.owed.get(key, (now, 0))
            self.owed[key] = (since, cycles + 1)
            self.stats.reclaim_checks += 1
            # A restart re-plans pipelined pods (their places are the old scheduler's memory): the new one
            # may wait behind other terminating victims, so the bound counts from the restart.
            waited = now - max(since, self.restarted_s)
            assert waited < RECLAIM_WITHIN_S or cycles < RECLAIM_WITHIN_CYCLES, (
                f"{key} of a queue below its quota waited {waited:.0f} s ({cycles} cycles): "
                f"{self.sim.pods[key].reason}"
            )
