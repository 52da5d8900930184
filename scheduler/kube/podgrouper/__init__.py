"""Podgrouper: every pod of ours belongs to a PodGroup derived from its top owner, as KAI Scheduler's does.

- `walk.py`: the owner walk, across every API group, UID-checked;
- `grouper.py`: from a pod and its owners to its group, through the rule of the top owner's kind;
- one module per family of kinds: `core.py` (Pods, Deployments, StatefulSets, Jobs, CronJobs ...),
  `kubeflow.py`, `jobset.py` (and TrainJob), `lws.py`, `ray.py`, `knative.py`, `spark.py`; Argo Workflows
  are skipped to their pods (`kinds.py`);
- `policy.py`: queue, priority class, preemptibility and grace period from KAI's labels and annotations;
- `kinds.py`: the list of known kinds, source of the rules, the RBAC and the docs table;
- `owners.py` and `reconciler.py`: reading owners (watched) and keeping the PodGroups in step.
See docs/podgrouper.md.
"""

from scheduler.kube.podgrouper.grouper import group_for_pod
from scheduler.kube.podgrouper.model import GroupSpec, OwnerRef, Workload
from scheduler.kube.podgrouper.names import group_name
from scheduler.kube.podgrouper.walk import Chain, owner_chain

__all__ = ["Chain", "GroupSpec", "OwnerRef", "Workload", "group_for_pod", "group_name", "owner_chain"]
