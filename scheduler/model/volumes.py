"""PersistentVolumes, PersistentVolumeClaims and StorageClasses as the scheduler reads them, and
kube-scheduler's rules for where a pod's claims let it run (VolumeBinding, VolumeZone).

- A claim is bound when it names its volume and carries `pv.kubernetes.io/bind-completed`; then the
  volume's required node affinity and its zone/region labels restrict the nodes.
- An unbound claim whose StorageClass binds `WaitForFirstConsumer` is decided per node: a volume the
  claim may take there (available, of its class, large enough, same volume mode, the access modes it asks
  for, its selector, the volume's node affinity; a volume pre-bound to the claim is the only one it may
  take), else provisioning (the class has a provisioner, and its `allowedTopologies` include the node).
  A claim a node was already selected for (`volume.kubernetes.io/selected-node`) is being provisioned
  there: that node, if the class may provision on it.

- Any other unbound claim (Immediate binding, no class, a class that does not exist, pre-bound but not
  yet bound) waits for the PV controller: the pod fits nowhere until then; so does a pod whose claim does
  not exist.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api.quantity import InvalidQuantity, parse_quantity
from scheduler.model.selectors import (
    InvalidSelector,
    LabelSelector,
    NodeSelectorTerm,
    Requirement,
    parse_label_selector,
    parse_node_selector_term,
)

BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
# The node labels VolumeZone compares with a bound volume's (beta ones matched with their GA name too).
ZONE_LABELS = {
    "topology.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region": "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
}

Obj = Mapping[str, Any]


class InvalidVolumeObject(ValueError):
    """A volume object the scheduler cannot read; one line."""


@dataclass(frozen=True)
class Volume:
    name: str
    class_name: str
    capacity: int  # bytes
    access_modes: frozenset[str]
    volume_mode: str
    labels: tuple[tuple[str, str], ...]
    claim_ref: tuple[str, str, str] | None  # (namespace, name, uid or "")
    available: bool  # status.phase Available
    deleting: bool
    node_terms: tuple[NodeSelectorTerm, ...] | None  # required node affinity; None: any node

    def bound_to(self, claim: Claim) -> bool:
        if self.claim_ref is None:
            return False
        ns, name, uid = self.claim_ref
        return (ns, name) == (claim.namespace, claim.name) and (not uid or uid == claim.uid)

    def zone_requirements(self) -> tuple[Requirement, ...]:
        """VolumeZone: the node's label (or its GA name) must be one of the volume's values ("a__b")."""
        return tuple(Requirement(k, "In", tuple(v.split("__"))) for k, v in self.labels if k in ZONE_LABELS)


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    uid: str
    class_name: str  # "" : none
    volume_name: str
    bind_completed: bool
    request: int  # bytes of storage
    access_modes: frozenset[str]
    volume_mode: str
    selector: LabelSelector | None
    selected_node: str | None
    deleting: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        return bool(self.volume_name) and self.bind_completed


@dataclass(frozen=True)
class StorageClass:
    name: str
    provisioner: str
    wait_for_consumer: bool
    allowed_topologies: tuple[NodeSelectorTerm, ...] | None  # None: every node

    @property
    def provisions(self) -> bool:
        return bool(self.provisioner) and self.provisioner != NO_PROVISIONER


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise InvalidVolumeObject(f"{obj.get('kind', 'object')} without metadata.name")
    return meta


def _map(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _bytes(raw: object) -> int:
    if raw is None:
        return 0
    try:
        return math.ceil(parse_quantity(raw))
    except InvalidQuantity as exc:
        raise InvalidVolumeObject(f"storage {raw!r}: {exc}") from None


def _strings(raw: object) -> frozenset[str]:
    return frozenset(str(v) for v in raw) if isinstance(raw, list) else frozenset()


def _terms(raw: object, what: str) -> tuple[NodeSelectorTerm, ...]:
    terms = raw if isinstance(raw, list) else []
    parsed = (parse_node_selector_term(t, f"{what}[{i}]") for i, t in enumerate(terms))
    return tuple(t for t in parsed if t is not None)


def parse_volume(obj: Obj) -> Volume:
    meta = _meta(obj)
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    annotations = _map(meta.get("annotations"))
    affinity = _map(_map(spec.get("nodeAffinity")).get("required"))
    ref = spec.get("claimRef")
    claim_ref = None
    if isinstance(ref, Mapping):
        claim_ref = (str(ref.get("namespace") or ""), str(ref.get("name") or ""), str(ref.get("uid") or ""))
    try:
        node_terms = _terms(affinity.get("nodeSelectorTerms"), "nodeSelectorTerms") if affinity else None
    except InvalidSelector as exc:
        raise InvalidVolumeObject(str(exc)) from None
    return Volume(
        name=str(meta["name"]),
        class_name=str(annotations.get(BETA_CLASS, spec.get("storageClassName") or "")),
        capacity=_bytes(_map(spec.get("capacity")).get("storage")),
        access_modes=_strings(spec.get("accessModes")),
        volume_mode=str(spec.get("volumeMode") or "Filesystem"),
        labels=tuple(sorted((str(k), str(v)) for k, v in _map(meta.get("labels")).items())),
        claim_ref=claim_ref,
        available=status.get("phase") == "Available",
        deleting=bool(meta.get("deletionTimestamp")),
        node_terms=node_terms,
    )


def parse_claim(obj: Obj) -> Claim:
    meta = _meta(obj)
    spec = _map(obj.get("spec"))
    annotations = _map(meta.get("annotations"))
    if BETA_CLASS in annotations:
        class_name = str(annotations[BETA_CLASS])
    else:
        class_name = str(spec.get("storageClassName") or "")
    try:
        selector = parse_label_selector(spec.get("selector"), "spec.selector")
    except InvalidSelector as exc:
        raise InvalidVolumeObject(str(exc)) from None
    return Claim(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        class_name=class_name,
        volume_name=str(spec.get("volumeName") or ""),
        bind_completed=BIND_COMPLETED in annotations,
        request=_bytes(_map(_map(spec.get("resources")).get("requests")).get("storage")),
        access_modes=_strings(spec.get("accessModes")),
        volume_mode=str(spec.get("volumeMode") or "Filesystem"),
        selector=selector,
        selected_node=str(annotations[SELECTED_NODE]) if SELECTED_NODE in annotations else None,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def parse_storage_class(obj: Obj) -> StorageClass:
    meta = _meta(obj)
    topologies = obj.get("allowedTopologies")
    allowed = None
    if isinstance(topologies, list) and topologies:
        terms = []
        for t in topologies:
            exprs = _map(t).get("matchLabelExpressions")
            reqs = tuple(
                Requirement(
                    str(_map(e).get("key") or ""), "In", tuple(str(v) for v in _map(e).get("values") or ())
                )
                for e in (exprs if isinstance(exprs, list) else [])
            )
            terms.append(NodeSelectorTerm(expressions=reqs) if reqs else NodeSelectorTerm(valid=False))
        allowed = tuple(terms)
    return StorageClass(
        name=str(meta["name"]),
        provisioner=str(obj.get("provisioner") or ""),
        wait_for_consumer=obj.get("volumeBindingMode") == "WaitForFirstConsumer",
        allowed_topologies=allowed,
    )


def may_take(volume: Volume, claim: Claim) -> bool:
    """Whether `claim` may bind `volume` on some node (FindMatchingVolume's checks but the node's): a
    volume pre-bound to it qualifies on capacity and mode alone; another must be available, unbound, of
    its class, with the access modes it asks for and matching its selector."""
    if volume.claim_ref is not None and not volume.bound_to(claim):
        return False
    if volume.capacity < claim.request or volume.volume_mode != claim.volume_mode or volume.deleting:
        return False
    if volume.bound_to(claim):
        return True
    return (
        volume.available
        and (claim.selector is None or claim.selector.matches(dict(volume.labels)))
        and volume.class_name == claim.class_name
        and claim.access_modes <= volume.access_modes
    )
