"""Before a pod's Binding: what kube-scheduler's VolumeBinding does at PreBind for the pod's claims that
wait for their first consumer, so that the volume controllers act on the node the scheduler chose.

For each such claim (unbound, its StorageClass `WaitForFirstConsumer`):
- a volume it may take on that node (the rules of `scheduler/model/volumes.py`, the smallest first, as
  FindMatchingVolume): the volume is pre-bound to it (`spec.claimRef`, and
  `pv.kubernetes.io/bound-by-controller`), and the PV controller completes the binding;
- otherwise it is marked for provisioning there: `volume.kubernetes.io/selected-node: <node>` on the claim
  (the external provisioner makes the volume in the node's topology).
Each write is a patch guarded by the object's resourceVersion as the watch cache holds it: a claim or a
volume that changed since (taken by another pod, bound meanwhile) fails the bind, and the pod is placed
again with what the watch then shows. kube-scheduler also waits for the bindings to complete before it
binds the pod; Tessera binds at once and the kubelet waits for the volumes before it starts the
containers (docs/differences-from-kube-scheduler.md).

Binders call `prepare` before the Binding request (a step of its own, kept out of the binder's requests).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.model.volumes import (
    BOUND_BY_CONTROLLER,
    SELECTED_NODE,
    InvalidVolumeObject,
    may_take,
    parse_claim,
    parse_storage_class,
    parse_volume,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Lookup = Callable[[str], Obj | None]


class VolumePrebind:
    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        claims: Lookup,
        classes: Lookup,
        volumes: Callable[[], Iterable[Obj]],
        node: Lookup,
    ) -> None:
        self.core = core
        self._claims, self._classes, self._volumes, self._node = claims, classes, volumes, node

    def prepare(self, namespace: str, claim_names: Iterable[str], node: str) -> str | None:
        """Pre-bind or mark for provisioning the pod's claims that wait for their first consumer; the
        reason when that fails (the bind then fails, and is retried), None when done."""
        node_obj = self._node(node) or {}
        labels = {str(k): str(v) for k, v in ((node_obj.get("metadata") or {}).get("labels") or {}).items()}
        chosen: set[str] = set()
        for name in claim_names:
            obj = self._claims(f"{namespace}/{name}")
            if obj is None:
                return f'persistentvolumeclaim "{name}" not found'
            try:
                why = self._prepare_claim(obj, node, labels, chosen)
            except (InvalidVolumeObject, ApiException) as exc:
                why = f"preparing claim {namespace}/{name} for node {node}: {exc}"
            if why is not None:
                return why
        return None

    def _prepare_claim(self, obj: Obj, node: str, labels: dict[str, str], chosen: set[str]) -> str | None:
        claim = parse_claim(obj)
        if claim.bound or claim.volume_name:
            return None
        cls_obj = self._classes(claim.class_name) if claim.class_name else None
        if cls_obj is None or not parse_storage_class(cls_obj).wait_for_consumer:
            return None  # the PV controller binds it (the filter kept the pod pending meanwhile)
        if claim.selected_node is not None:
            return (
                None
                if claim.selected_node == node
                else f"claim {claim.key} is being provisioned on {claim.selected_node}"
            )
        volumes = []
        for v in self._volumes():
            try:
                volumes.append((parse_volume(v), v))
            except InvalidVolumeObject:
                continue
        fits = [
            (vol, raw) for vol, raw in volumes
            if vol.name not in chosen and vol.class_name == claim.class_name and may_take(vol, claim)
            and (vol.node_terms is None or any(t.matches(node, labels) for t in vol.node_terms))
        ]  # fmt: skip
        prebound = [(vol, raw) for vol, raw in fits if vol.bound_to(claim)]
        if prebound or fits:
            vol, raw = (prebound or sorted(fits, key=lambda f: (f[0].capacity, f[0].name)))[0]
            chosen.add(vol.name)
            if not vol.bound_to(claim):
                self._patch(self.core.patch_persistent_volume, (vol.name,), raw, {
                    "metadata": {"annotations": {BOUND_BY_CONTROLLER: "yes"}},
                    "spec": {"claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                          "namespace": claim.namespace, "name": claim.name, "uid": claim.uid}},
                })  # fmt: skip
                log.info("volume %s pre-bound to claim %s for node %s", vol.name, claim.key, node)
            return None
        self._patch(self.core.patch_namespaced_persistent_volume_claim, (claim.name, claim.namespace), obj,
                    {"metadata": {"annotations": {SELECTED_NODE: node}}})  # fmt: skip
        log.info("claim %s is to be provisioned on node %s", claim.key, node)
        return None

    @staticmethod
    def _patch(call: Callable[..., Any], args: tuple[str, ...], current: Obj, change: Obj) -> None:
        """A merge patch that applies only to `current`'s resourceVersion (409 Conflict otherwise)."""
        version = (current.get("metadata") or {}).get("resourceVersion")
        body = {**change, "metadata": {**change.get("metadata", {}), "resourceVersion": version}}
        call(*args, body)
