"""Load Kubernetes YAML manifests (Nodes, Pods, Queues, PodGroups, Topologies, PodDisruptionBudgets) for
the simulated cluster.

KAI Scheduler's Queues and PodGroups (scheduling.run.ai) are read too, translated as the scheduler's
`--kai-compat` does, and pods of `kai-scheduler` are simulated as Tessera's (docs/kai-compat.md).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scheduler.api.cli import yaml_problem
from scheduler.api.kai import is_kai, translate
from scheduler.api.keys import KAI_SCHEDULER_NAME, SCHEDULER_NAME, TRANSLATED_FROM
from scheduler.cache.containment import one_line

SUPPORTED = (
    "Node", "Pod", "Queue", "PodGroup", "PriorityClass", "Topology", "PodDisruptionBudget", "Namespace",
    "PersistentVolume", "PersistentVolumeClaim", "StorageClass",
)  # fmt: skip
# Kinds a cluster needs and the simulation does not: read without a warning. (Namespaces are simulated:
# their labels are what affinity terms' namespace selectors match; a pod's namespace exists even unwritten.)
NOTHING_TO_SIMULATE: tuple[str, ...] = ()
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class ManifestError(ValueError):
    pass


@dataclass
class Manifests:
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {k: [] for k in SUPPORTED})
    notes: list[str] = field(default_factory=list)
    kai_pods: int = 0  # pods of kai-scheduler simulated as Tessera's (one warning for all of them)

    @property
    def warnings(self) -> list[str]:
        kai = f"{self.kai_pods} pods of schedulerName {KAI_SCHEDULER_NAME} are simulated as Tessera's"
        return [*self.notes, *([kai] if self.kai_pods else [])]

    def extend(self, other: Manifests) -> None:
        self.notes.extend(other.notes)
        self.kai_pods += other.kai_pods
        for k, v in other.objects.items():
            for obj in v:
                self.add(k, obj)

    def add(self, kind: str, obj: dict[str, Any]) -> None:
        """Add an object; of a Tessera and a translated KAI Queue/PodGroup with the same name, Tessera's is
        kept (the rule of --kai-compat), with a warning."""
        kai = TRANSLATED_FROM in ((obj.get("metadata") or {}).get("annotations") or {})
        same = [o for o in self.objects[kind] if kind in ("Queue", "PodGroup") and _key(o) == _key(obj)]
        other = [o for o in same if (TRANSLATED_FROM in (o["metadata"].get("annotations") or {})) != kai]
        if other:
            self.notes.append(
                f"KAI {kind} {_key(obj)} is ignored: Tessera's {kind} of the same name is used (docs/kai-compat.md)"
            )
            if kai:
                return
            self.objects[kind] = [o for o in self.objects[kind] if not any(o is x for x in other)]
        self.objects[kind].append(obj)


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return (
        f"{meta.get('namespace') or 'default'}/{meta['name']}"
        if obj.get("kind") == "PodGroup"
        else meta["name"]
    )


def load_documents(docs: Iterable[Any], source: str) -> Manifests:
    out = Manifests()
    for i, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind", "").endswith("List") else [doc]
        for obj in items or []:
            if not isinstance(obj, dict) or "kind" not in obj:
                out.notes.append(f"{source}: document {i} is not a Kubernetes object; skipped")
                continue
            kind = obj["kind"]
            if kind in NOTHING_TO_SIMULATE:
                continue
            if kind not in (*SUPPORTED, "Job"):
                out.notes.append(f"{source}: document {i}: kind {kind} is not simulated; skipped")
                continue
            if not (obj.get("metadata") or {}).get("name"):
                out.notes.append(f"{source}: document {i}: {kind} without metadata.name; skipped")
                continue
            if is_kai(obj):
                try:
                    t = translate(obj)
                except ValueError as exc:
                    reason = one_line(exc)
                    out.notes.append(
                        f"{source}: document {i}: {kind} {obj['metadata']['name']}: {reason}; skipped"
                    )
                    continue
                out.notes += [f"{source}: KAI {kind} {obj['metadata']['name']}: {n}" for n in t.notes]
                kind, obj = t.kind, t.obj
            pods = job_pods(obj) if kind == "Job" else [obj] if kind == "Pod" else []
            for pod in pods:  # the simulated cluster plays the Job controller: the Job's pods arrive
                if (pod.get("spec") or {}).get("schedulerName") == KAI_SCHEDULER_NAME:
                    pod["spec"]["schedulerName"] = SCHEDULER_NAME
                    out.kai_pods += 1
                out.add("Pod", pod)
            if kind not in ("Job", "Pod"):
                out.add(kind, obj)
    return out


def job_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a batch/v1 Job starts at once: `parallelism` (default 1, at most `completions`), named
    `<job>-<index>` from the pod template."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    template = spec.get("template") or {}
    parallel = int(spec.get("parallelism", 1) or 0)
    if spec.get("completions") is not None:
        parallel = min(parallel, int(spec["completions"]))
    pods = []
    for i in range(max(parallel, 0)):
        tmeta = copy.deepcopy(template.get("metadata") or {})
        tmeta["name"] = f"{meta.get('name')}-{i}"
        tmeta["namespace"] = meta.get("namespace") or "default"
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta.get("name"), "controller": True}
        tmeta["ownerReferences"] = [owner]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": tmeta,
                "spec": copy.deepcopy(template.get("spec") or {}),
            }
        )
    return pods


def expand(paths: Iterable[Path]) -> list[Path]:
    """Files as given; a directory stands for its manifest files, in name order (as `kubectl -f DIR`)."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            out.extend(sorted(p for p in path.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file()))
        else:
            out.append(path)
    return out


def load_files(paths: Iterable[Path]) -> Manifests:
    """Parse YAML files (multi-document) and directories of them; raises ManifestError with file and
    reason on unreadable input."""
    out = Manifests()
    for path in expand(paths):
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ManifestError(f"{path}: cannot read ({exc.strerror})") from None
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise ManifestError(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
        out.extend(load_documents(docs, str(path)))
    return out
