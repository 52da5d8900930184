"""The `Topology` CRD (cluster-scoped) and the topology constraint a gang or a single pod may carry.

A Topology names the node labels that place a node in the data centre, outermost first (zone > block >
rack > NVLink domain), as KAI Scheduler's `kai.scheduler/v1alpha1 Topology` and Kueue's
`kueue.x-k8s.io/v1alpha1 Topology` do. A node belongs to the topology when it carries every level's
label; its domain at a level is the path of its label values down to that level, so `rack-1` under
`block-a` and `rack-1` under `block-b` are different racks.

A constraint names the topology and a level by its node label key or by the level's alias:
`requiredTopologyLevel` (the gang lands inside one domain of that level, or waits) and/or
`preferredTopologyLevel` (it is packed into as few domains of that level as it can). PodGroups carry it as
`spec.topologyConstraint` (KAI's field names); single pods, and pods of groups that leave it unset, as the
annotations `tessera.dev/topology`, `tessera.dev/topology-required-placement` and
`tessera.dev/topology-preferred-placement` (KAI's `kai.scheduler/...` names are accepted too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from scheduler.api.keys import API_VERSION
from scheduler.api.meta import ObjectMeta

# A Kubernetes label key: an optional DNS-subdomain prefix and a name (as KAI's and Kueue's CRDs check).
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
HOSTNAME_LABEL = "kubernetes.io/hostname"
MAX_LEVELS = 16

TOPOLOGY = "tessera.dev/topology"
TOPOLOGY_REQUIRED = "tessera.dev/topology-required-placement"
TOPOLOGY_PREFERRED = "tessera.dev/topology-preferred-placement"
KAI_TOPOLOGY = "kai.scheduler/topology"
KAI_TOPOLOGY_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_TOPOLOGY_PREFERRED = "kai.scheduler/topology-preferred-placement"


class TopologyLevel(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    node_label: str = Field(alias="nodeLabel", min_length=1, max_length=316, pattern=LABEL_KEY_PATTERN)
    alias: str | None = Field(default=None, min_length=1, max_length=63, pattern=LABEL_KEY_PATTERN)

    @property
    def name(self) -> str:
        """How people read the level: its alias, else its label key."""
        return self.alias or self.node_label


class TopologySpec(BaseModel):
    levels: list[TopologyLevel] = Field(min_length=1, max_length=MAX_LEVELS)

    @model_validator(mode="after")
    def _check(self) -> TopologySpec:
        labels = [lv.node_label for lv in self.levels]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"nodeLabel must be unique; repeated: {', '.join(dup)}")
        if HOSTNAME_LABEL in labels[:-1]:
            raise ValueError(f"{HOSTNAME_LABEL} can only be the last (lowest) level")
        aliases = [lv.alias for lv in self.levels if lv.alias]
        dup = sorted({a for a in aliases if aliases.count(a) > 1})
        if dup:
            raise ValueError(f"alias must be unique; repeated: {', '.join(dup)}")
        clash = sorted(set(aliases) & set(labels))
        if clash:
            raise ValueError(f"an alias may not be another level's nodeLabel: {', '.join(clash)}")
        return self


class Topology(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    api_version: Literal["scheduling.tessera.dev/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["Topology"] = "Topology"
    metadata: ObjectMeta
    spec: TopologySpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def label_keys(self) -> tuple[str, ...]:
        return tuple(lv.node_label for lv in self.spec.levels)

    def level_index(self, level: str) -> int | None:
        """Index (0 = outermost) of the level named by its node label or alias; None if it has none."""
        for i, lv in enumerate(self.spec.levels):
            if level in (lv.node_label, lv.alias):
                return i
        return None


class TopologyConstraint(BaseModel):
    """Where a gang's pods must (required) or should (preferred) sit together."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    topology: str | None = Field(default=None, min_length=1, max_length=253)  # an object name
    required_topology_level: str | None = Field(
        default=None, alias="requiredTopologyLevel", min_length=1, max_length=316
    )  # a label key or an alias
    preferred_topology_level: str | None = Field(
        default=None, alias="preferredTopologyLevel", min_length=1, max_length=316
    )

    @property
    def active(self) -> bool:
        """Whether it constrains anything (a topology and at least one level)."""
        return bool(self.topology and (self.required_topology_level or self.preferred_topology_level))

    def describe(self) -> str:
        parts = [f"topology {self.topology}"]
        if self.required_topology_level:
            parts.append(f"required level {self.required_topology_level}")
        if self.preferred_topology_level:
            parts.append(f"preferred level {self.preferred_topology_level}")
        return ", ".join(parts)


_ANNOTATIONS = frozenset(
    {
        TOPOLOGY,
        KAI_TOPOLOGY,
        TOPOLOGY_REQUIRED,
        KAI_TOPOLOGY_REQUIRED,
        TOPOLOGY_PREFERRED,
        KAI_TOPOLOGY_PREFERRED,
    }
)


def constraint_from_annotations(annotations: Mapping[str, str]) -> TopologyConstraint | None:
    """The constraint a pod (or its workload) states in annotations, Tessera's keys first, then KAI's;
    None when it states none."""
    if _ANNOTATIONS.isdisjoint(annotations):  # (most pods: asked of every job a restart builds)
        return None

    def get(ours: str, kai: str) -> str | None:
        value = annotations.get(ours) or annotations.get(kai)
        return value.strip() or None if value is not None else None

    topology = get(TOPOLOGY, KAI_TOPOLOGY)
    required = get(TOPOLOGY_REQUIRED, KAI_TOPOLOGY_REQUIRED)
    preferred = get(TOPOLOGY_PREFERRED, KAI_TOPOLOGY_PREFERRED)
    if topology is None and required is None and preferred is None:
        return None
    # Not validated: a name too long for the CRD is simply one no Topology has, and the pod is told so.
    return TopologyConstraint.model_construct(
        topology=topology, required_topology_level=required, preferred_topology_level=preferred
    )
