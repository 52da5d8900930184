"""Load Kubernetes YAML manifests (Nodes, Pods, Queues, PodGroups) for the simulated cluster."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = ("Node", "Pod", "Queue", "PodGroup")


class ManifestError(ValueError):
    pass


@dataclass
class Manifests:
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {k: [] for k in SUPPORTED})
    warnings: list[str] = field(default_factory=list)

    def extend(self, other: Manifests) -> None:
        for k, v in other.objects.items():
            self.objects[k].extend(v)
        self.warnings.extend(other.warnings)


def load_documents(docs: Iterable[Any], source: str) -> Manifests:
    out = Manifests()
    for i, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind", "").endswith("List") else [doc]
        for obj in items or []:
            if not isinstance(obj, dict) or "kind" not in obj:
                out.warnings.append(f"{source}: document {i} is not a Kubernetes object; skipped")
                continue
            kind = obj["kind"]
            if kind not in SUPPORTED:
                out.warnings.append(f"{source}: document {i}: kind {kind} is not simulated; skipped")
                continue
            if not (obj.get("metadata") or {}).get("name"):
                out.warnings.append(f"{source}: document {i}: {kind} without metadata.name; skipped")
                continue
            out.objects[kind].append(obj)
    return out


def load_files(paths: Iterable[Path]) -> Manifests:
    """Parse YAML files (multi-document); raises ManifestError with file and reason on unreadable input."""
    out = Manifests()
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ManifestError(f"{path}: cannot read ({exc.strerror})") from None
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise ManifestError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
        out.extend(load_documents(docs, str(path)))
    return out
