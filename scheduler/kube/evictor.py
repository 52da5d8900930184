"""Evicting pods through the Eviction API, with an Event on the victim naming the action and the pod it makes
room for.

The eviction is a deletion with the grace period the scheduler asks for (capped: `--max-victim-grace`)
when the pod's own is longer. Where a PodDisruptionBudget refuses (429), a forced eviction
(`--disruption-budgets delete`, KAI Scheduler's behaviour) deletes the pod anyway, with that grace period,
and says so in a Warning event naming the budget's words; otherwise the refusal is the caller's
(scheduler/framework/eviction.py)."""

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

    def evict(
        self,
        namespace: str,
        name: str,
        uid: str,
        action: str,
        message: str,
        *,
        grace_s: float | None = None,
        force: bool = False,
    ) -> EvictResult:
        """Evict through the Eviction API; `message` (naming the action and the beneficiary) goes on the
        Event. `grace_s`: the deletion's grace period (None: the pod's own). `force`: where a disruption
        budget refuses, delete the pod anyway."""
        why = message or f"evicted by the {action} action"
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid),
            grace_period_seconds=None if grace_s is None else max(0, int(grace_s)),
        )
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace), delete_options=options
        )
        ref = ObjectRef("Pod", namespace, name, uid)
        try:
            finish(self.core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return EvictResult(True, "already gone")
            reason = _refusal(exc)
            if force and exc.status == 429:  # a disruption budget: deleted anyway, as KAI Scheduler does
                return self._delete(ref, options, action, why, reason)
            log.info("eviction of %s/%s refused: %s", namespace, name, reason)
            self.recorder.record(ref, "EvictionRefused", f"{why} was refused: {reason}", type_="Warning",
                                 rate_limited=True)  # fmt: skip
            return EvictResult(False, reason)
        self.recorder.record(
            ObjectRef("Pod", namespace, name, uid), ACTION_REASONS.get(action, "Evicted"), why
        )
        return EvictResult(True)

    def _delete(
        self, ref: ObjectRef, options: client.V1DeleteOptions, action: str, why: str, refusal: str
    ) -> EvictResult:
        try:
            finish(
                self.core.delete_namespaced_pod(ref.name, ref.namespace, body=options, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status == 404:
                return EvictResult(True, "already gone")
            reason = api_reason(exc)
            log.warning(
                "deleting %s/%s after its eviction was refused failed: %s", ref.namespace, ref.name, reason
            )
            return EvictResult(False, f"{refusal}; deleting it failed: {reason}")
        log.info("%s/%s deleted: its eviction was refused (%s)", ref.namespace, ref.name, refusal)
        self.recorder.record(ref, "DisruptionBudgetOverridden",
                             f"{why}: deleted although {refusal} (the scheduler's --disruption-budgets is "
                             "delete, as KAI Scheduler: a queue below its quota gets it back)", type_="Warning")  # fmt: skip
        self.recorder.record(ref, ACTION_REASONS.get(action, "Evicted"), why)
        return EvictResult(True, "deleted: its disruption budget refused the eviction")


def _refusal(exc: ApiException) -> str:
    """The PDB's own words when it refused (details.causes), else the Status message."""
    try:
        causes = json.loads(exc.body or "{}").get("details", {}).get("causes") or []
    except ValueError:
        causes = []
    detail = "; ".join(str(c.get("message")) for c in causes if c.get("message"))
    return f"{api_reason(exc)} ({detail})" if detail else api_reason(exc)
