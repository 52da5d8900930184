"""What a pod's spec says about where it may run, besides its resources: the fields kube-scheduler's
default plugins read (docs/kubernetes-scheduling.md lists them), parsed once into immutable values.

- node affinity: required `nodeSelectorTerms` (OR of terms) and preferred terms with their weights;
- inter-pod affinity and anti-affinity: required and preferred `PodAffinityTerm`s, each a label selector
  over pods in some namespaces (its own by default, a list, or those a namespace selector picks), and a
  topology key;
- topology spread constraints (`maxSkew`, `whenUnsatisfiable`, `minDomains`, the node policies,
  `matchLabelKeys`, merged into the selector with the pod's own values as kube-scheduler does);
- host ports (`protocol/port/hostIP`, with the defaults of the API server: TCP, 0.0.0.0, and every
  container port of a `hostNetwork` pod);
- volumes: the PersistentVolumeClaims it mounts (and ephemeral volumes' claims, named `<pod>-<volume>`).

`matchLabelKeys`/`mismatchLabelKeys` of affinity terms are merged into their selector here as the API
server merges them at creation (so a manifest read from a file means what it means on a cluster).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.model.selectors import (
    InvalidSelector,
    LabelSelector,
    NodeSelectorTerm,
    Requirement,
    as_list,
    as_map,
    parse_label_selector,
    parse_node_selector_term,
)

HOSTNAME_LABEL = "kubernetes.io/hostname"
ANY_IP = "0.0.0.0"


@dataclass(frozen=True)
class PodAffinityTerm:
    """Pods matching `selector` in `namespaces` (or in namespaces `namespace_selector` picks), in the
    same domain of `topology_key`. A selector that is None selects no pod."""

    selector: LabelSelector | None
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str

    def selects_namespace(self, namespace: str, labels: Mapping[str, str] | None) -> bool:
        """Whether pods of `namespace` (whose labels are `labels`, None: unknown) are in the term's scope."""
        if namespace in self.namespaces:
            return True
        return (
            self.namespace_selector is not None
            and labels is not None
            and self.namespace_selector.matches(labels)
        )

    def selects(self, namespace: str, ns_labels: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
        return (
            self.selector is not None
            and self.selects_namespace(namespace, ns_labels)
            and self.selector.matches(labels)
        )


@dataclass(frozen=True)
class WeightedTerm:
    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    hard: bool  # whenUnsatisfiable: DoNotSchedule (else ScheduleAnyway)
    selector: LabelSelector | None  # with matchLabelKeys merged in; None selects no pod
    min_domains: int | None
    honor_node_affinity: bool  # nodeAffinityPolicy: Honor (the default)
    honor_node_taints: bool  # nodeTaintsPolicy: Honor (the default is Ignore)


@dataclass(frozen=True)
class PodConstraints:
    """Everything in a pod's spec that restricts or ranks its nodes beyond resources, selector and
    tolerations. Frozen and hashable: pods of one template share one."""

    required_nodes: tuple[NodeSelectorTerm, ...] | None = None  # None: no required node affinity
    preferred_nodes: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    affinity: tuple[PodAffinityTerm, ...] = ()
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[str, ...] = ()  # "protocol/port/hostIP"
    claims: tuple[str, ...] = ()  # PersistentVolumeClaims it mounts, in its namespace

    @property
    def interpod(self) -> bool:
        """Whether where other pods run matters to it (affinity, anti-affinity or spread)."""
        return bool(
            self.affinity or self.anti_affinity or self.preferred_affinity or self.preferred_anti_affinity
            or self.spread
        )  # fmt: skip


NO_CONSTRAINTS = PodConstraints()


def port_code(protocol: str, port: int, ip: str) -> str:
    return f"{protocol or 'TCP'}/{port}/{ip or ANY_IP}"


def split_port(code: str) -> tuple[str, int, str]:
    protocol, port, ip = code.split("/", 2)
    return protocol, int(port), ip


def _int(raw: object, what: str, minimum: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not minimum <= raw <= (1 << 31) - 1:
        raise InvalidSelector(f"{what} must be an integer >= {minimum}")
    return raw


def _affinity_term(raw: object, what: str, namespace: str, labels: Mapping[str, str]) -> PodAffinityTerm:
    term = as_map(raw, what)
    selector = parse_label_selector(term.get("labelSelector"), f"{what}.labelSelector")
    # matchLabelKeys / mismatchLabelKeys: merged as the API server does at creation (only into a selector
    # that is set, with the pod's own values of the keys it has).
    if selector is not None:
        more = tuple(
            Requirement(str(k), op, (labels[str(k)],))
            for field, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn"))
            for k in as_list(term.get(field), f"{what}.{field}")
            if str(k) in labels
        )
        selector = selector.with_requirements(more)
    ns_selector = parse_label_selector(term.get("namespaceSelector"), f"{what}.namespaceSelector")
    namespaces = frozenset(str(n) for n in as_list(term.get("namespaces"), f"{what}.namespaces"))
    if not namespaces and ns_selector is None:
        namespaces = frozenset({namespace})  # neither: the pod's own namespace
    key = str(term.get("topologyKey") or "")
    if not key:
        raise InvalidSelector(f"{what}.topologyKey must not be empty")
    return PodAffinityTerm(selector, namespaces, ns_selector, key)


def _weighted(raw: object, what: str, namespace: str, labels: Mapping[str, str]) -> WeightedTerm:
    w = as_map(raw, what)
    weight = _int(w.get("weight"), f"{what}.weight", 1)
    if weight > 100:
        raise InvalidSelector(f"{what}.weight must be 1..100")
    return WeightedTerm(
        weight, _affinity_term(w.get("podAffinityTerm"), f"{what}.podAffinityTerm", namespace, labels)
    )


def _spread(raw: object, what: str, labels: Mapping[str, str]) -> SpreadConstraint:
    c = as_map(raw, what)
    when = str(c.get("whenUnsatisfiable") or "")
    if when not in ("DoNotSchedule", "ScheduleAnyway"):
        raise InvalidSelector(f"{what}.whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway")
    key = str(c.get("topologyKey") or "")
    if not key:
        raise InvalidSelector(f"{what}.topologyKey must not be empty")
    min_domains = c.get("minDomains")
    selector = parse_label_selector(c.get("labelSelector"), f"{what}.labelSelector")
    keys = [str(k) for k in as_list(c.get("matchLabelKeys"), f"{what}.matchLabelKeys")]
    if selector is not None and keys:  # kube-scheduler merges them with the pod's own values
        selector = selector.with_requirements(
            tuple(Requirement(k, "In", (labels[k],)) for k in keys if k in labels)
        )
    policies = {}
    for policy, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
        value = str(c.get(policy) or default)
        if value not in ("Honor", "Ignore"):
            raise InvalidSelector(f"{what}.{policy} must be Honor or Ignore")
        policies[policy] = value == "Honor"

    return SpreadConstraint(
        max_skew=_int(c.get("maxSkew"), f"{what}.maxSkew", 1),
        topology_key=key,
        hard=when == "DoNotSchedule",
        selector=selector,
        min_domains=None if min_domains is None else _int(min_domains, f"{what}.minDomains", 1),
        honor_node_affinity=policies["nodeAffinityPolicy"],
        honor_node_taints=policies["nodeTaintsPolicy"],
    )


def _host_ports(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """Host ports of the app containers and sidecars (what runs for the pod's life), as kube-scheduler's
    NodePorts reads them; a hostNetwork pod's container ports are host ports (API defaulting)."""
    host_network = spec.get("hostNetwork") is True
    codes: list[str] = []
    for kind in ("initContainers", "containers"):
        for c in as_list(spec.get(kind), f"spec.{kind}"):
            if kind == "initContainers" and as_map(c, "container").get("restartPolicy") != "Always":
                continue
            for p in as_list(as_map(c, "container").get("ports"), "ports"):
                port = as_map(p, "port")
                host = port.get("hostPort") or (port.get("containerPort") if host_network else None)
                if isinstance(host, int) and not isinstance(host, bool) and 0 < host < 65536:
                    codes.append(
                        port_code(str(port.get("protocol") or "TCP"), host, str(port.get("hostIP") or ""))
                    )
    return tuple(dict.fromkeys(codes))


def _claims(spec: Mapping[str, Any], pod_name: str) -> tuple[str, ...]:
    names: list[str] = []
    for v in as_list(spec.get("volumes"), "spec.volumes"):
        vol = as_map(v, "volume")
        pvc = vol.get("persistentVolumeClaim")
        if isinstance(pvc, Mapping) and pvc.get("claimName"):
            names.append(str(pvc["claimName"]))
        elif isinstance(vol.get("ephemeral"), Mapping):
            names.append(f"{pod_name}-{vol.get('name')}")  # the claim the ephemeral volume controller makes
    return tuple(dict.fromkeys(names))


def parse_constraints(
    spec: Mapping[str, Any], namespace: str, name: str, labels: Mapping[str, str]
) -> PodConstraints:
    """The pod's constraints; InvalidSelector (one line) for what the API server would refuse."""
    affinity = as_map(spec.get("affinity"), "spec.affinity")
    node_aff = as_map(affinity.get("nodeAffinity"), "nodeAffinity")
    required_nodes: tuple[NodeSelectorTerm, ...] | None = None
    req = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is not None:
        terms = as_list(as_map(req, "required").get("nodeSelectorTerms"), "nodeSelectorTerms")
        parsed = (parse_node_selector_term(t, f"nodeSelectorTerms[{i}]") for i, t in enumerate(terms))
        required_nodes = tuple(t for t in parsed if t is not None)
    preferred_nodes = []
    for i, p in enumerate(
        as_list(node_aff.get("preferredDuringSchedulingIgnoredDuringExecution"), "preferred")
    ):
        pref = as_map(p, f"preferred[{i}]")
        weight = _int(pref.get("weight"), f"nodeAffinity.preferred[{i}].weight", 0)
        term = parse_node_selector_term(pref.get("preference"), f"preferred[{i}].preference")
        if weight and term is not None and term.valid:
            preferred_nodes.append((weight, term))
    out: dict[str, Any] = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        section = as_map(affinity.get(kind), kind)
        hard = "required" + "DuringSchedulingIgnoredDuringExecution"
        soft = "preferred" + "DuringSchedulingIgnoredDuringExecution"
        out[kind] = tuple(
            _affinity_term(t, f"{kind}.required[{i}]", namespace, labels)
            for i, t in enumerate(as_list(section.get(hard), f"{kind}.required"))
        )
        out[kind + "/soft"] = tuple(
            _weighted(t, f"{kind}.preferred[{i}]", namespace, labels)
            for i, t in enumerate(as_list(section.get(soft), f"{kind}.preferred"))
        )
    spread = tuple(
        _spread(c, f"topologySpreadConstraints[{i}]", labels)
        for i, c in enumerate(
            as_list(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints")
        )
    )
    return PodConstraints(
        required_nodes=required_nodes,
        preferred_nodes=tuple(preferred_nodes),
        affinity=out["podAffinity"],
        anti_affinity=out["podAntiAffinity"],
        preferred_affinity=out["podAffinity/soft"],
        preferred_anti_affinity=out["podAntiAffinity/soft"],
        spread=spread,
        host_ports=_host_ports(spec),
        claims=_claims(spec, name),
    )


@dataclass(frozen=True)
class PodScope:
    """What inter-pod rules need of one pod: its namespace and labels (what other pods' terms and spread
    selectors see), its node selector (spread's node affinity policy) and its own constraints. Frozen and
    hashable: every pod of one template has the same."""

    namespace: str
    labels: tuple[tuple[str, str], ...]
    node_selector: tuple[tuple[str, str], ...]
    constraints: PodConstraints
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:  # it keys per-pod memos: hashed once, not per lookup
        object.__setattr__(
            self, "_hash", hash((self.namespace, self.labels, self.node_selector, self.constraints))
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)
