"""The bind echo: the API's answer to our own bind, applied without parsing the pod again.

After every bind the watch sends the same pod back, on the node we chose, soon Running, and marked
allocated by the device plugin. It is the commonest pod event of a busy cluster, and the mirror already
holds everything in it but the phase, the start time and the annotations Tessera wrote itself (the GPU
assignment, the device plugin's allocation): `bind_echo` makes the new version from the old one with those
(without parsing the pod again; the mirror replaces the old version by it). Any other change (another node,
other annotations, queue or group, a deletion, something malformed) takes the mirror's full path, which
parses the pod and reports what it cannot read. Pods of other schedulers always take it (the allocation
the device plugin records on them says which GPUs they hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT
from scheduler.cache.cluster import WatchEvent
from scheduler.cache.ledger import Ledger
from scheduler.model.parse import pod_group, pod_queue, started_s
from scheduler.model.types import PodInfo, PodPhase


def bind_echo(ev: WatchEvent, pods: Mapping[str, PodInfo], ledger: Ledger) -> PodInfo | None:
    """The mirror's pod (`pods`, by uid) as `ev` shows it when `ev` is the echo of our bind: a new version
    of it with the phase, start time and annotations of `ev`; None: `ev` is something else and takes the
    full path. Our bind is the ledger's fact: the pod holds its place there, and the mirror shows it on
    that node already or (the first echo) still pending."""
    if ev.type != "MODIFIED":
        return None
    meta = ev.obj.get("metadata") or {}
    uid = str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    old, held = pods.get(uid), ledger.pods.get(uid)
    if old is None or held is None or not old.ours or meta.get("deletionTimestamp"):
        return None
    node = (ev.obj.get("spec") or {}).get("nodeName")
    if old.phase is PodPhase.BOUND:
        if node != old.node:
            return None
    elif old.phase is not PodPhase.PENDING or old.node is not None or node != ledger.node_name(held):
        return None
    phase = str((ev.obj.get("status") or {}).get("phase") or "Pending")
    if phase not in ("Pending", "Running"):
        return None
    raw_annotations, raw_labels = meta.get("annotations") or {}, meta.get("labels") or {}
    if not isinstance(raw_annotations, Mapping) or not isinstance(raw_labels, Mapping):
        return None  # malformed: the full path reports it and keeps what the pod holds
    annotations = {str(k): str(v) for k, v in raw_annotations.items()}
    if _without_ours(annotations) != _without_ours(old.annotations):
        return None
    overlay = ev.overlay
    queue = overlay.queue if overlay is not None and overlay.queue else None
    if (queue or pod_queue({str(k): str(v) for k, v in raw_labels.items()})) != old.queue:
        return None
    namespace = old.namespace
    group = f"{namespace}/{overlay.group}" if overlay is not None and overlay.group else None
    if (group or pod_group(namespace, annotations)) != old.group:
        return None
    return replace(
        old,
        node=node,
        phase=PodPhase.RUNNING if phase == "Running" else PodPhase.BOUND,
        started_s=started_s(ev.obj),
        annotations=annotations,
    )


def _without_ours(annotations: dict[str, str]) -> dict[str, str]:
    """The annotations without those Tessera writes (the assignment, the device plugin's allocation)."""
    return {k: v for k, v in annotations.items() if k not in (GPU_ASSIGNMENT, GPU_ALLOCATED)}
