"""Evicting pods through the Eviction API, so PodDisruptionBudgets are respected, with an Event on the
victim naming the action and the pod it makes room for."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.kube.binder import api_reason, finish
from scheduler.kube.recorder import EventRecorder, ObjectRef

log = logging.getLogger(__name__)

# Event reason per scheduling action.
ACTION_REASONS = {
    "reclaim": "Reclaimed",
    "preempt": "Preempted",
    "consolidate": "Consolidated",
    "stale-gang": "StaleGangEvicted",
}


@dataclass(frozen=True)
class EvictResult:
    ok: bool
    reason: str = ""


class Evictor:
    def __init__(self, core: client.CoreV1Api, recorder: EventRecorder) -> None:
        self.core = core
        self.recorder = recorder

    def evict(self, namespace: str, name: str, uid: str, action: str, message: str) -> EvictResult:
        """Evict through the Eviction API; `message` (naming the action and the beneficiary) goes on the Event."""
        why = message or f"evicted by the {action} action"
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
        )
        try:
            finish(self.core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return EvictResult(True, "already gone")
            reason = _refusal(exc)
            log.info("eviction of %s/%s refused: %s", namespace, name, reason)
            self.recorder.record(
                ObjectRef("Pod", namespace, name, uid),
                "EvictionRefused",
                f"{why} was refused: {reason}",
                type_="Warning",
                rate_limited=True,
            )
            return EvictResult(False, reason)
        self.recorder.record(
            ObjectRef("Pod", namespace, name, uid), ACTION_REASONS.get(action, "Evicted"), why
        )
        return EvictResult(True)


def _refusal(exc: ApiException) -> str:
    """The PDB's own words when it refused (details.causes), else the Status message."""
    try:
        causes = json.loads(exc.body or "{}").get("details", {}).get("causes") or []
    except ValueError:
        causes = []
    detail = "; ".join(str(c.get("message")) for c in causes if c.get("message"))
    return f"{api_reason(exc)} ({detail})" if detail else api_reason(exc)
