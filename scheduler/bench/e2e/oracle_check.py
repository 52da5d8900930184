"""Was every pod bound where kube-scheduler's own filters allow it? (the affinity workload of `bench e2e`)

For each bound pod, in the order the watch saw the binds, the pods bound before it and the nodes are
handed to `sched-oracle` (kube-scheduler's default Filter plugins, scheduler/sandbox/sched_oracle.py): the
pod's node must be among the nodes it finds feasible. Objects are trimmed to what the filters read.

The order binds are seen in is not quite the order a scheduler decided them in (both schedulers bind
asynchronously, several at a time). That changes nothing for the rules that only ever tighten as pods
are added (resources, ports, affinity to nodes, anti-affinity: a conflict shows whichever of the two came
last), but topology spread's skew can shrink as well as grow: a pod the bind order finds skewed is judged
again with the pods created before it (the order both schedulers take pods in), and counted feasible if
that order allows it (`spread_in_creation_order`). kube-scheduler's own placements are checked the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.sandbox.sched_oracle import OracleError, OracleMissing, SchedOracle, find

Obj = dict[str, Any]
_POD_SPEC = ("containers", "initContainers", "overhead", "nodeSelector", "affinity", "tolerations",
             "topologySpreadConstraints", "volumes", "hostNetwork", "nodeName", "resources")  # fmt: skip


def _pod(obj: Mapping[str, Any]) -> Obj:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels") if k in meta},
        "spec": {k: spec[k] for k in _POD_SPEC if k in spec},
        "status": {"phase": (obj.get("status") or {}).get("phase") or "Pending"},
    }


def check_bound(
    pods: Iterable[Mapping[str, Any]],
    bind_order: Mapping[str, float],
    nodes: list[Obj],
    namespaces: list[Obj],
) -> dict[str, Any]:
    """{checked, feasible, infeasible: [pod: node, why]} (or {error}) for the bound `pods` (objects as the
    API server has them, with their node) in `bind_order` (name -> when the watch saw the bind)."""
    try:
        binary = find()
    except OracleMissing as exc:
        return {"error": str(exc)}
    bound = sorted((p for p in pods if (p.get("spec") or {}).get("nodeName")),
                   key=lambda p: bind_order.get(p["metadata"]["name"], 0.0))  # fmt: skip
    placed = [(_pod(obj), str(obj["spec"]["nodeName"])) for obj in bound]
    running = [{**p, "spec": {**p["spec"], "nodeName": n}, "status": {"phase": "Running"}} for p, n in placed]
    for p, _ in placed:
        p["spec"].pop("nodeName", None)
    by_creation = sorted(range(len(placed)), key=lambda i: placed[i][0]["metadata"]["name"])
    rank = {i: r for r, i in enumerate(by_creation)}
    infeasible: list[str] = []
    second_look = 0
    with SchedOracle(binary) as oracle:
        try:
            verdicts = oracle.evaluate_sequence(running, nodes, namespaces=namespaces)
            for i, ((pod, node), verdict) in enumerate(zip(placed, verdicts, strict=True)):
                if node in verdict.feasible:
                    continue
                plugin, reasons = verdict.filtered.get(node, ("", ()))
                if plugin == "PodTopologySpread":
                    created_before = [running[j] for j in by_creation[: rank[i]]]
                    if node in oracle.evaluate(pod, nodes, created_before, namespaces=namespaces).feasible:
                        second_look += 1
                        continue
                infeasible.append(f"{pod['metadata']['name']} on {node}: {plugin}: {'; '.join(reasons)}")
        except OracleError as exc:
            return {"error": str(exc)}
    return {"checked": len(placed), "feasible": len(placed) - len(infeasible), "infeasible": infeasible[:20],
            "spread_in_creation_order": second_look}  # fmt: skip
