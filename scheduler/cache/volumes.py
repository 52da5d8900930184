"""The cluster's PersistentVolumes, PersistentVolumeClaims and StorageClasses, from the watch, and where a
pod's claims let it run: kube-scheduler's VolumeBinding and VolumeZone as array programs over the node
rows (the rules are in `scheduler/model/volumes.py`).

A volume's node affinity and a class's allowed topologies are node selector terms, matched over the label
columns like a pod's required node affinity (`scheduler/placement/node_rules.py`); a claim another node was
selected for matches that row. `checks(d)` answers kube-scheduler's verdicts in its order, each a bool[C]
over the rows; a claim that rules out every node (missing, or unbound and not waiting for its first
consumer) is an all-False check with kube-scheduler's reason.
"""

from __future__ import annotations

from typing import Any

from scheduler.cache.cluster import WatchEvent
from scheduler.model.selectors import Requirement
from scheduler.model.volumes import (
    ZONE_LABELS,
    Claim,
    StorageClass,
    Volume,
    may_take,
    parse_claim,
    parse_storage_class,
    parse_volume,
)
from scheduler.placement.node_rules import requirement_mask, terms_mask
from scheduler.state.cluster_state import ClusterState
from scheduler.state.demand import PodDemand

Array = Any
VOLUME_KINDS = ("PersistentVolume", "PersistentVolumeClaim", "StorageClass")

NOT_FOUND = 'persistentvolumeclaim "{}" not found'
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ZONE_CONFLICT = "node(s) had no available volume zone"


class VolumeCatalog:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.volumes: dict[str, Volume] = {}
        self.claims: dict[str, Claim] = {}  # by namespace/name
        self.classes: dict[str, StorageClass] = {}
        self.version = 0
        self._masks: dict[tuple[str, tuple[str, ...]], tuple[tuple[int, int], list[tuple[str, Array]]]] = {}

    def apply(self, ev: WatchEvent) -> None:
        """One watch event of a volume kind; ValueError (one line) for an object that cannot be read (it is
        then left out, as if absent)."""
        meta = ev.obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if ev.kind == "PersistentVolume":
            self._put(self.volumes, name, None if ev.type == "DELETED" else parse_volume(ev.obj))
        elif ev.kind == "PersistentVolumeClaim":
            key = f"{meta.get('namespace') or 'default'}/{name}"
            self._put(self.claims, key, None if ev.type == "DELETED" else parse_claim(ev.obj))
        elif ev.kind == "StorageClass":
            self._put(self.classes, name, None if ev.type == "DELETED" else parse_storage_class(ev.obj))

    def forget(self, kind: str, key: str) -> None:
        """An object that could not be read is left out (as if absent)."""
        tables: dict[str, dict[str, Any]] = {
            "PersistentVolume": self.volumes, "PersistentVolumeClaim": self.claims, "StorageClass": self.classes,
        }  # fmt: skip
        self._put(tables[kind], key, None)

    def _put(self, table: dict[str, Any], key: str, value: Any) -> None:
        if value is None:
            if table.pop(key, None) is not None:
                self.version += 1
        elif table.get(key) != value:
            table[key] = value
            self.version += 1

    # ------------------------------------------------------------------------------------- queries
    def mask(self, d: PodDemand) -> Array | None:
        checks = self.checks(d)
        if not checks:
            return None
        ok = checks[0][1]
        for _, m in checks[1:]:
            ok = ok & m
        return ok

    def checks(self, d: PodDemand) -> list[tuple[str, Array]]:
        """(kube-scheduler's reason, bool[C] rows that pass) for the pod's claims; [] without any."""
        scope = d.scope
        if scope is None or not scope.constraints.claims:
            return []
        memo = (scope.namespace, scope.constraints.claims)
        stamp = (self.version, self.state.node_epoch)
        kept = self._masks.get(memo)
        if kept is not None and kept[0] == stamp and kept[1][0][1].shape[0] == self.state.capacity:
            return kept[1]
        out = self._checks(scope.namespace, scope.constraints.claims)
        if len(self._masks) > 256:
            self._masks.clear()
        self._masks[memo] = (stamp, out)
        return out

    def _checks(self, namespace: str, names: tuple[str, ...]) -> list[tuple[str, Array]]:
        s, xp = self.state, self.state.xp
        nowhere = xp.zeros((s.capacity,), dtype=xp.bool)
        everywhere = xp.ones((s.capacity,), dtype=xp.bool)
        claims = []
        for name in names:
            claim = self.claims.get(f"{namespace}/{name}")
            if claim is None:
                return [(NOT_FOUND.format(name), nowhere)]
            claims.append(claim)
        bound = [c for c in claims if c.bound]
        waiting = [c for c in claims if not c.bound and c.class_name in self.classes and not c.volume_name
                   and self.classes[c.class_name].wait_for_consumer]  # fmt: skip
        if len(bound) + len(waiting) < len(claims):
            return [(UNBOUND_IMMEDIATE, nowhere)]
        node_ok, pv_found = everywhere, True
        zone_ok = everywhere
        for c in bound:
            volume = self.volumes.get(c.volume_name)
            if volume is None:
                pv_found = False
                continue
            if volume.node_terms is not None:
                node_ok = node_ok & terms_mask(s, volume.node_terms)
            zone_ok = zone_ok & self._zone_mask(volume)
        bind_ok = everywhere
        for c in waiting:
            bind_ok = bind_ok & self._claim_mask(c)
        out = [(NODE_CONFLICT, node_ok), (BIND_CONFLICT, bind_ok)]
        if not pv_found:
            out.append((PV_NOT_EXIST, nowhere))
        out.append((ZONE_CONFLICT, zone_ok))
        return out

    def _claim_mask(self, claim: Claim) -> Array:
        """bool[C]: rows where an unbound WaitForFirstConsumer claim can be satisfied: a volume it may take
        there, or provisioning (the class has a provisioner and its allowed topologies include the row). A
        claim a node was selected for is being provisioned there: that row, if the class may provision on it."""
        s, xp = self.state, self.state.xp
        everywhere = xp.ones((s.capacity,), dtype=xp.bool)
        cls = self.classes[claim.class_name]
        provision = xp.zeros((s.capacity,), dtype=xp.bool)
        if cls.provisions:
            provision = (
                terms_mask(s, cls.allowed_topologies) if cls.allowed_topologies is not None else everywhere
            )
        if claim.selected_node is not None:
            row = s.row_of(claim.selected_node)
            return (
                (s.row_id == row) & provision if row is not None else xp.zeros((s.capacity,), dtype=xp.bool)
            )
        candidates = [
            v for v in self.volumes.values() if v.class_name == claim.class_name and may_take(v, claim)
        ]
        prebound = next((v for v in candidates if v.bound_to(claim)), None)
        if prebound is not None:  # the one it may take: there or nowhere (then provisioning)
            candidates = [prebound]
        static = xp.zeros((s.capacity,), dtype=xp.bool)
        for v in candidates:
            static = static | (terms_mask(s, v.node_terms) if v.node_terms is not None else everywhere)
        return static | provision

    def _zone_mask(self, volume: Volume) -> Array:
        """VolumeZone: a node with any zone/region label must have the volume's value for each it has."""
        s, xp = self.state, self.state.xp
        reqs = volume.zone_requirements()
        if not reqs:
            return xp.ones((s.capacity,), dtype=xp.bool)
        labelled = xp.zeros((s.capacity,), dtype=xp.bool)
        for key in ZONE_LABELS:
            labelled = labelled | requirement_mask(s, Requirement(key, "Exists"))
        ok = xp.ones((s.capacity,), dtype=xp.bool)
        for r in reqs:
            here = requirement_mask(s, r)
            ga = ZONE_LABELS[r.key]
            if ga != r.key:  # a beta label on the volume also matches the node's GA label
                beta_absent = ~requirement_mask(s, Requirement(r.key, "Exists"))
                here = here | (beta_absent & requirement_mask(s, Requirement(ga, "In", r.values)))

            ok = ok & here
        return ok | ~labelled
