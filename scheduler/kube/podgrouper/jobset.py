"""JobSet (and, through it, the Kubeflow Trainer's TrainJob): one group per JobSet.

How the JobSet controller makes them: for each replicatedJob it creates `replicas` Jobs (owned by the
JobSet, labelled `jobset.sigs.k8s.io/replicatedjob-name` and `restart-attempt`), whose pods the Job
controller creates. A replicatedJob counts `replicas x min(parallelism, completions)` pods (or its
template's `kai.scheduler/batch-min-member` per Job, as KAI).

- By default (`startupPolicyOrder: AnyOrder`, no `dependsOn`) every Job is created at once: minMember is
  the sum over all replicatedJobs.
- With `startupPolicyOrder: InOrder` the controller creates a replicatedJob's Jobs only once the previous
  one is ready, and with `dependsOn` only once the named ones are Ready or Complete. Counting every
  replicatedJob would wait for pods that are created only after the others run. So minMember is the sum
  over the replicatedJobs that have been started (some of their pods exist) and have not completed: it
  grows step by step, each step placed as a gang on top of the running ones, and a completed step
  (an initializer) stops counting. KAI reaches the same with sub-groups (MinSubGroup 1 for InOrder).
- `kai.scheduler/batch-min-member` on the JobSet asks for only that many replicatedJobs (KAI's
  MinSubGroup); without sub-groups it becomes the sum of the smallest ones, a bound that never waits for
  pods that need not come.
Pods of an earlier restart attempt (being replaced after a JobSet restart) are not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.kube.podgrouper import policy
from scheduler.kube.podgrouper.model import (
    GroupSpec,
    Obj,
    Workload,
    as_int,
    dig,
    labels,
    name_of,
    spec,
    status,
    uid_of,
)
from scheduler.kube.podgrouper.names import group_name

REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
IN_ORDER = "InOrder"


@dataclass(frozen=True)
class Step:
    name: str
    replicas: int
    size: int  # pods that must run together: replicas x pods per Job


def _pods_per_job(rj: Mapping[str, object], warnings: list[str]) -> int:
    override = policy.min_member_override({"metadata": dig(rj, "template", "metadata") or {}}, warnings)
    if override is not None:
        return override
    parallelism = as_int(dig(rj, "template", "spec", "parallelism"))
    parallelism = 1 if parallelism is None else parallelism
    completions = as_int(dig(rj, "template", "spec", "completions"))
    return parallelism if completions is None else min(parallelism, completions)


def steps(jobset: Obj, warnings: list[str]) -> list[Step]:
    out = []
    for rj in spec(jobset).get("replicatedJobs") or []:
        if not isinstance(rj, Mapping):
            continue
        replicas = as_int(rj.get("replicas"))
        replicas = 1 if replicas is None else replicas
        out.append(Step(str(rj.get("name") or ""), replicas, replicas * _pods_per_job(rj, warnings)))
    return out


def is_ordered(jobset: Obj) -> bool:
    order = dig(jobset, "spec", "startupPolicy", "startupPolicyOrder")
    rjs = spec(jobset).get("replicatedJobs") or []
    return order == IN_ORDER or any(isinstance(rj, Mapping) and rj.get("dependsOn") for rj in rjs)


def _current_members(w: Workload, name: str, jobset: Obj) -> list[Obj]:
    restarts = as_int(status(jobset).get("restarts"))
    pods = w.members(name)
    if restarts is None:
        return pods
    return [p for p in pods if as_int(labels(p).get(RESTART_ATTEMPT)) in (None, restarts)]


def _completed(step: Step, jobset: Obj, pods: list[Obj]) -> bool:
    for rs in status(jobset).get("replicatedJobsStatus") or []:
        named = isinstance(rs, Mapping) and rs.get("name") == step.name
        if named and (as_int(rs.get("succeeded")) or 0) >= step.replicas:
            return True
    # The JobSet's status may lag its pods: a step whose pods all succeeded is complete too.
    return len(pods) >= step.size and all(dig(p, "status", "phase") == "Succeeded" for p in pods)


def jobset_rule(w: Workload, jobset: Obj) -> GroupSpec:
    warnings: list[str] = []
    name = group_name(name_of(jobset), uid_of(jobset))
    pool = steps(jobset, warnings)
    if is_ordered(jobset):
        pods = _current_members(w, name, jobset)
        by_step = {s.name: [p for p in pods if labels(p).get(REPLICATED_JOB) == s.name] for s in pool}
        pool = [s for s in pool if by_step[s.name] and not _completed(s, jobset, by_step[s.name])]
    sizes = sorted(s.size for s in pool)
    wanted = policy.min_member_override(jobset, warnings)
    min_member = sum(sizes[:wanted] if wanted is not None else sizes)
    return policy.build(w, name=name, min_member=min_member, owner=jobset, warnings=warnings)
