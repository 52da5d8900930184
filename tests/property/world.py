"""The world the property tests play in: a simulated cluster that records every bind, the operations a user,
an operator or a kubelet may perform on it, and the invariants checked after every cycle, computed from
scratch from what the cluster runs (never from the scheduler's own books).

Operations are plain tuples drawn by hypothesis (`tests/property/test_operation_sequences.py`); `World.do`
applies one, `World.cycle` runs the real scheduling cycle and checks:

- no GPU over 1000 milli or over its memory, and the scheduler's arrays equal to the pods that run, GPU by
  GPU, CPU and memory by node;
- no partial gang: a gang bound in a cycle runs at least minMember members;
- no queue limit exceeded by a bind (a pod counts in the queue it was admitted to, or in `default` once
  that queue is gone: relabelling a running pod does not move it);
- no double bind: the scheduler never binds a pod that is bound;
- every pending pod of Tessera's is told why it waits.
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
    POD_GROUP,
    QUEUE_LABEL,
    SIM_DURATION,
    WHOLE_GPU_RESOURCE,
)
from scheduler.cache.cluster import BindResult
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.model.parse import cpu_milli, memory_mib
from scheduler.model.types import PodInfo
from scheduler.sim.builtin import node, pod, podgroup, queue
from scheduler.sim.cluster import SIM_RECREATE, SimCluster
from scheduler.state.bulk import arrays_agree
from tests.framework.helpers import assert_arrays_match_world

Op = tuple[Any, ...]
MODELS = {"A100": 40960, "H100": 81920, "T4": 15360}
# (name, parent): `org` is a parent queue (pods go to its leaves), `ghost` never exists.
QUEUES = (("default", None), ("org", None), ("a", "org"), ("b", "org"), ("c", None))
LEAVES = ("default", "a", "b", "c")
# Values no one should write (the parser bounds them; a value that slips through is contained).
HOSTILE = ("nan", "-1", "0", "1e99999", "9" * 4000, "9" * 19, "٠.٥", "1_000", "abc", "", "0.5\x00")
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

    def as_dict(self) -> dict[str, Any]:
        return {
            "sequences": self.sequences, "cycles": self.cycles, "operations": sum(self.operations.values()),
            "by_operation": dict(sorted(self.operations.items())), "binds": self.binds,
            "limit_checks": self.limit_checks, "limit_checks_skipped": self.limit_checks_skipped,
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


class World:
    def __init__(self, nodes: list[tuple[str, int]], limits: dict[str, float], stats: Stats) -> None:
        self.sim = RecordingSim()
        self.stats = stats
        self.node_objs: dict[str, dict[str, Any]] = {}
        for i, (model, gpus) in enumerate(nodes):
            obj = node(f"n{i}", (model, MODELS[model]), gpus, 64, 512)
            self.node_objs[obj["metadata"]["name"]] = obj
            self.sim.add_object("Node", copy.deepcopy(obj))
        self.queue_objs: dict[str, dict[str, Any]] = {}
        for name, parent in QUEUES:
            self.queue_objs[name] = queue(name, parent, -1, limit=limits.get(name, -1))
            self.sim.add_object("Queue", copy.deepcopy(self.queue_objs[name]))
        self.live_queues = set(self.queue_objs)
        self.groups: dict[str, int] = {}  # namespace/name -> minMember, of valid PodGroups that exist
        self.group_queue: dict[str, str] = {}  # namespace/name -> the queue its PodGroup names
        self.admitted: dict[str, str] = {}  # running pod key -> the queue it counts in
        self.seq = 0
        self.sched = Scheduler(self.sim, SchedulerConfig(backend="numpy", expected_nodes=8))

    # ------------------------------------------------------------------------------------ operations
    def do(self, op: Op) -> None:
        kind = op[0]
        self.stats.operations[kind] += 1
        getattr(self, f"_{kind}")(*op[1:])

    def _submit(self, request: tuple[str, str, int], leaf: str, priority: str, duration: int) -> None:
        ann, whole = request_annotations(request)
        self.seq += 1
        obj = pod(f"p{self.seq}", leaf, arrival_s=0, duration_s=duration, cpu="2", memory="4Gi",
                  annotations=ann, gpus=whole, priority_class=priority)  # fmt: skip
        obj["metadata"]["namespace"] = "ns"
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
        self.sim.evict(info, action="user", message="deleted by the user")
        self.admitted.pop(key, None)

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

    def _group_edit(self, index: int, min_member: int) -> None:
        names = sorted(self.groups)
        if not names:
            return
        key = names[index % len(names)]
        ns, name = key.split("/")
        self.groups[key] = min_member
        self.sim.update_object("PodGroup", podgroup(name, ns, self.group_queue[key], min_member))

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
            self.admitted[key] = self._queue_of(key)
            assert self.admitted[key] in self.live_queues, f"{key} bound into queue {self.admitted[key]}"
        assert_arrays_match_world(self.sim, self.sched)
        ledger = self.sched.cache.ledger
        holdings = [h.placement for h in (*ledger.pods.values(), *ledger.reserved.values())]
        assert arrays_agree(ledger.state, holdings)  # the check a contained failure is followed by
        self._check_cpu_memory()
        self._check_gangs(new)
        self._check_limits(new)
        self._check_told(result.reasons)

    def _queue_of(self, key: str) -> str:
        """The queue a pod bound now counts in, from what the world says: the queue its gang's running
        members count in, else its PodGroup's, else its label's (none: `default`)."""
        meta = self.sim.pods[key].obj["metadata"]
        group = (meta.get("annotations") or {}).get(POD_GROUP)
        if group is not None:
            members = [k for k in self.admitted if (self.sim.pods[k].obj["metadata"].get("annotations") or {})
                       .get(POD_GROUP) == group]  # fmt: skip
            if members:
                return self.admitted[members[0]]
            return self.group_queue[f"ns/{group}"]
        labels = meta.get("labels")
        return (labels.get(QUEUE_LABEL) if isinstance(labels, dict) else None) or "default"

    def _forget_finished(self) -> None:
        """Pods no longer counted in their queue: finished, gone, or being deleted."""
        for key in list(self.admitted):
            rec = self.sim.pods.get(key)
            if (
                rec is None
                or (rec.obj.get("status") or {}).get("phase") != "Running"
                or rec.obj["metadata"].get("deletionTimestamp")
            ):
                del self.admitted[key]

    def _running(self, *, terminating: bool = True) -> list[dict[str, Any]]:
        """Pods that run; `terminating=False` leaves out those being deleted (evicted victims in their grace
        period: still on their node, out of the plan and of their queue's usage, as in KAI)."""
        return [r.obj for r in self.sim.pods.values()
                if r.obj["spec"].get("nodeName") and (r.obj.get("status") or {}).get("phase") == "Running"
                and (terminating or not r.obj["metadata"].get("deletionTimestamp"))]  # fmt: skip

    def _check_cpu_memory(self) -> None:
        state = self.sched.cache.state
        cpu: Counter[str] = Counter()
        mem: Counter[str] = Counter()
        for obj in self._running(terminating=False):
            requests = obj["spec"]["containers"][0]["resources"]["requests"]
            cpu[obj["spec"]["nodeName"]] += cpu_milli(requests["cpu"])
            mem[obj["spec"]["nodeName"]] += memory_mib(requests["memory"])
        on_node: Counter[str] = Counter()  # what is physically there: victims still terminating too
        for obj in self._running():
            on_node[obj["spec"]["nodeName"]] += cpu_milli(
                obj["spec"]["containers"][0]["resources"]["requests"]["cpu"]
            )
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
        bound_groups = {
            (self.sim.pods[k].obj["metadata"].get("annotations") or {}).get(POD_GROUP) for k, _ in new
        }
        running = Counter(
            (obj["metadata"].get("annotations") or {}).get(POD_GROUP) for obj in self._running()
        )
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
        for key, q in self.admitted.items():
            raw = self.sim.pods[key].obj["metadata"]["annotations"].get(GPU_ASSIGNMENT)
            if raw is None:
                continue  # CPU only
            a = GPUAssignment.from_annotation(raw)
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
