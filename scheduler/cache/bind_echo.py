"""The bind echo: the API's answer to our own bind, applied without parsing the pod again.

After every bind the watch sends the same pod back, on the node we chose, soon Running. It is the commonest
pod event of a busy cluster, and the mirror already holds everything in it but the phase, the start time
and the GPU assignment annotation it wrote itself: `bind_echo` updates those in place. Any other change
(another node, other annotations or queue, a deletion, something malformed) takes the mirror's full path,
which parses the pod and reports what it cannot read.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.api.keys import GPU_ASSIGNMENT
from scheduler.cache.cluster import WatchEvent
from scheduler.cache.ledger import Ledger
from scheduler.model.parse import pod_queue, started_s
from scheduler.model.types import PodInfo, PodPhase


def bind_echo(ev: WatchEvent, pods: Mapping[str, PodInfo], ledger: Ledger) -> PodInfo | None:
    """The mirror's pod (`pods`, by uid) updated in place when `ev` is the echo of our bind; None: `ev` is
    something else and takes the full path (nothing changed)."""
    if ev.type != "MODIFIED":
        return None
    meta = ev.obj.get("metadata") or {}
    uid = str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    old = pods.get(uid)
    if old is None or old.phase != PodPhase.BOUND or uid not in ledger or meta.get("deletionTimestamp"):
        return None
    phase = str((ev.obj.get("status") or {}).get("phase") or "Pending")
    if (ev.obj.get("spec") or {}).get("nodeName") != old.node or phase not in ("Pending", "Running"):
        return None
    raw_annotations, raw_labels = meta.get("annotations") or {}, meta.get("labels") or {}
    if not isinstance(raw_annotations, Mapping) or not isinstance(raw_labels, Mapping):
        return None  # malformed: the full path reports it and keeps what the pod holds
    annotations = {str(k): str(v) for k, v in raw_annotations.items()}
    if _without_assignment(annotations) != _without_assignment(old.annotations):
        return None
    if pod_queue({str(k): str(v) for k, v in raw_labels.items()}) != old.queue:
        return None
    old.phase = PodPhase.RUNNING if phase == "Running" else PodPhase.BOUND
    old.started_s = started_s(ev.obj)
    old.annotations = annotations
    return old


def _without_assignment(annotations: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if k != GPU_ASSIGNMENT}
