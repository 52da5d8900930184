"""Random clusters and pods with every scheduling field kube-scheduler's default filters read, as plain
Kubernetes objects (hypothesis strategies), and Tessera's feasible nodes for a pod on such a cluster.

Values come from small pools (three zones, a few labels, apps and namespaces) so that selectors, domains,
ports and volumes collide often. Quantities are what users write (cpu in cores or milli, memory in Mi/Gi:
Tessera counts memory in MiB, docs/differences-from-kube-scheduler.md). Existing pods are bound to nodes
that have room for them (kube-scheduler would not have put them anywhere else either).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from scheduler.api.quantity import parse_quantity
from scheduler.cache.cache import Cache
from scheduler.cache.cluster import WatchEvent
from scheduler.model.parse import parse_pod, pod_resources
from scheduler.placement.filters import feasible
from scheduler.state.backend import get_namespace
from scheduler.state.demand import demand_for

Obj = dict[str, Any]
ZONES = ["a", "b", "c"]
NAMESPACES = {"default": {"env": "prod"}, "team-a": {"env": "prod"}, "team-b": {"env": "dev"}}
APPS = ["web", "db", "cache"]
TOPOLOGY_KEYS = ["kubernetes.io/hostname", "topology.kubernetes.io/zone", "rack"]
TAINTS = [
    {"key": "dedicated", "value": "infer", "effect": "NoSchedule"},
    {"key": "spot", "effect": "PreferNoSchedule"},
    {"key": "broken", "value": "true", "effect": "NoExecute"},
    {"key": "team", "value": "a", "effect": "NoSchedule"},
]
TOLERATIONS = [
    {"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Exists"},
    {"key": "broken", "operator": "Exists", "effect": "NoExecute"},
    {"key": "team", "operator": "Equal", "value": "b"},
    {"operator": "Exists"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]
EXTENDED = "example.com/nic"
MI = 1024 * 1024


@dataclass
class Cluster:
    nodes: list[Obj]
    pods: list[Obj]  # bound
    namespaces: list[Obj]
    pvs: list[Obj] = field(default_factory=list)
    pvcs: list[Obj] = field(default_factory=list)
    storage_classes: list[Obj] = field(default_factory=list)


def namespace_objects() -> list[Obj]:
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, **labels}}}
        for ns, labels in NAMESPACES.items()
    ]  # fmt: skip


@st.composite
def nodes(draw: st.DrawFn) -> list[Obj]:
    out = []
    for i in range(draw(st.sampled_from([1, 2, 3, 4, 4, 5, 5, 6]))):
        name = f"n{i}"
        labels = {"kubernetes.io/hostname": name}
        if not draw(one_in(6)):
            labels["topology.kubernetes.io/zone"] = draw(st.sampled_from(ZONES))
        if draw(st.booleans()):
            labels["rack"] = f"r{draw(st.integers(0, 2))}"
        if not draw(one_in(4)):
            labels["gpus"] = str(draw(st.sampled_from([2, 4, 8, 4])))
        if draw(st.booleans()):
            labels["tier"] = draw(st.sampled_from(["x", "y"]))
        allocatable = {
            "cpu": draw(st.sampled_from(["2", "4", "8", "3500m"])),
            "memory": draw(st.sampled_from(["2Gi", "4Gi", "8Gi", "1536Mi"])),
            "pods": draw(st.sampled_from(["1", "3", "110", "110", "110"])),
        }
        if draw(st.integers(0, 3)):
            allocatable["ephemeral-storage"] = draw(st.sampled_from(["10Gi", "100Gi", "500Gi"]))
        if draw(st.booleans()):
            allocatable[EXTENDED] = str(draw(st.integers(0, 2)))
        if draw(one_in(4)):
            allocatable["hugepages-2Mi"] = draw(st.sampled_from(["0", "4Mi", "64Mi"]))
        spec: Obj = {}
        if draw(one_in(4)):
            spec["taints"] = draw(
                st.lists(
                    st.sampled_from(TAINTS),
                    min_size=1,
                    max_size=2,
                    unique_by=lambda t: (t["key"], t["effect"]),
                )
            )
        if draw(one_in(10)):
            spec["unschedulable"] = True
        out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                    "spec": spec, "status": {"allocatable": allocatable, "capacity": allocatable}})  # fmt: skip
    return out


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in `n` draws (hypothesis favours the ends of a range: the middle is not)."""
    return st.integers(0, n - 1).map(lambda i: i == n // 2) if n > 1 else st.just(True)


def _sometimes(values: list[str], n: int) -> st.SearchStrategy[str | None]:
    return st.tuples(one_in(n), st.sampled_from(values)).map(lambda t: t[1] if t[0] else None)


requests = st.fixed_dictionaries({
    "cpu": _sometimes(["100m", "500m", "1", "1500m", "2", "3"], 2),
    "memory": _sometimes(["64Mi", "512Mi", "1Gi", "1536Mi", "2Gi"], 2),

    "ephemeral-storage": _sometimes(["1Gi", "50Gi", "200Gi"], 5),
    EXTENDED: _sometimes(["1", "2"], 8),
    "hugepages-2Mi": _sometimes(["2Mi", "8Mi"], 10),
}).map(lambda r: {k: v for k, v in r.items() if v is not None})  # fmt: skip
light_requests = st.fixed_dictionaries({
    "cpu": _sometimes(["100m", "250m", "500m"], 2),
    "memory": _sometimes(["64Mi", "256Mi"], 2),
    "ephemeral-storage": _sometimes(["1Gi", "5Gi"], 6),
    EXTENDED: _sometimes(["1"], 10),
}).map(lambda r: {k: v for k, v in r.items() if v is not None})  # fmt: skip


@st.composite
def label_selector(draw: st.DrawFn, own: dict[str, str] | None = None) -> Obj:
    # (hypothesis favours the ends of a list: the common case is at both)
    kind = draw(st.sampled_from(["own", "empty", "other", "expr", "expr", "own"]))
    if kind == "empty":
        return {}
    if kind == "own" and own:
        return {"matchLabels": {"app": own["app"]}}
    if kind == "other":
        return {"matchLabels": {"app": draw(st.sampled_from(APPS))}}
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
    expr: Obj = {"key": draw(st.sampled_from(["app", "tier"])), "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = draw(
            st.lists(st.sampled_from([*APPS, "x", "y"]), min_size=1, max_size=2, unique=True)
        )
    return {"matchExpressions": [expr]}


@st.composite
def affinity_term(draw: st.DrawFn, own: dict[str, str]) -> Obj:
    term: Obj = {
        "labelSelector": draw(label_selector(own)),
        "topologyKey": draw(st.sampled_from(TOPOLOGY_KEYS)),
    }
    how = draw(st.sampled_from([0, 1, 2, 3, 0]))
    if how == 1:
        term["namespaces"] = draw(
            st.lists(st.sampled_from(sorted(NAMESPACES)), min_size=1, max_size=2, unique=True)
        )
    elif how == 2:
        term["namespaceSelector"] = {}
    elif how == 3:
        term["namespaceSelector"] = {"matchLabels": {"env": draw(st.sampled_from(["prod", "dev"]))}}
    return term


@st.composite
def node_term(draw: st.DrawFn) -> Obj:
    term: Obj = {}
    exprs = []
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["In", "Gt", "NotIn", "Exists", "DoesNotExist", "Lt", "In"]))
        keys = ["gpus"] if op in ("Gt", "Lt") else ["topology.kubernetes.io/zone", "rack", "gpus", "tier"]
        key = draw(st.sampled_from(keys))
        expr: Obj = {"key": key, "operator": op}
        if op in ("In", "NotIn"):
            pool = ZONES if key == "topology.kubernetes.io/zone" else ["r0", "r1", "x", "y", "4", "8"]
            expr["values"] = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True))
        elif op in ("Gt", "Lt"):
            expr["values"] = [draw(st.sampled_from(["2", "4", "8", "4"]))]

        exprs.append(expr)
    if exprs:
        term["matchExpressions"] = exprs
    if draw(one_in(4)) or not exprs:
        term["matchFields"] = [{"key": "metadata.name", "operator": draw(st.sampled_from(["In", "NotIn"])),
                                "values": [f"n{draw(st.integers(0, 5))}"]}]  # fmt: skip
    return term


def _container(name: str, reqs: Obj, ports: list[Obj] | None = None, **extra: Any) -> Obj:
    c: Obj = {"name": name, "image": "registry.local/app", "resources": {"requests": reqs} if reqs else {}}
    if ports:
        c["ports"] = ports
    return {**c, **extra}


host_ports = st.lists(
    st.fixed_dictionaries(
        {"containerPort": st.just(80), "hostPort": st.sampled_from([8080, 8080, 9090])},
        optional={
            "hostIP": st.sampled_from(["10.0.0.1", "10.0.0.2"]),
            "protocol": st.sampled_from(["TCP", "UDP", "TCP"]),
        },
    ),
    min_size=1,
    max_size=2,
)


@st.composite
def pod_spec(draw: st.DrawFn, name: str, namespace: str, labels: dict[str, str], rich: bool) -> Obj:
    reqs = requests if rich else light_requests
    spec: Obj = {
        "containers": [_container("main", draw(reqs), draw(host_ports) if draw(one_in(3)) else None)]
    }
    if draw(one_in(4)):
        spec["containers"].append(_container("side", draw(reqs)))
    if rich and draw(one_in(4)):
        inits = []
        for i in range(draw(st.integers(1, 2))):
            extra = {"restartPolicy": "Always"} if draw(st.booleans()) else {}
            inits.append(_container(f"init{i}", draw(requests), **extra))
        spec["initContainers"] = inits
    if rich and draw(one_in(6)):
        spec["overhead"] = {"cpu": "250m", "memory": "64Mi"}
    if rich and draw(one_in(6)):
        spec["nodeSelector"] = {"topology.kubernetes.io/zone": draw(st.sampled_from(ZONES))}
    if rich and draw(one_in(4)):
        spec["tolerations"] = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2))
    affinity: Obj = {}
    if rich and draw(one_in(4)):
        terms = draw(st.lists(node_term(), min_size=int(not draw(one_in(10))), max_size=2))
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    for kind in ("podAffinity", "podAntiAffinity"):
        if draw(one_in(4 if rich else 8)):
            terms = draw(st.lists(affinity_term(labels), min_size=1, max_size=2))
            affinity[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": terms}
    if affinity:
        spec["affinity"] = affinity
    if rich and draw(one_in(3)):  # spread needs nodes that pass the rest: the other features are rarer
        constraints = []
        for _ in range(draw(st.integers(1, 2))):
            c: Obj = {
                "maxSkew": draw(st.integers(1, 2)),
                "topologyKey": draw(st.sampled_from(TOPOLOGY_KEYS)),
                "whenUnsatisfiable": draw(
                    st.sampled_from(["DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"])
                ),
                "labelSelector": draw(label_selector(labels)),
            }
            if draw(one_in(3)):
                c["minDomains"] = draw(st.sampled_from([2, 3, 4, 5, 3]))

                c["whenUnsatisfiable"] = "DoNotSchedule"  # the API server requires it with minDomains
            if draw(one_in(4)):
                c["nodeAffinityPolicy"] = draw(st.sampled_from(["Honor", "Ignore"]))
            if draw(one_in(4)):
                c["nodeTaintsPolicy"] = draw(st.sampled_from(["Honor", "Ignore"]))
            if draw(one_in(5)):
                c["matchLabelKeys"] = ["tier"]
            constraints.append(c)
        spec["topologySpreadConstraints"] = constraints
    return spec


@st.composite
def pod_object(draw: st.DrawFn, name: str, *, rich: bool) -> Obj:
    # Mostly one namespace and one app: selectors and spread then count many pods.
    namespace = draw(st.sampled_from(["team-a", "default", "default", "default", "team-b"]))
    labels = {"app": draw(st.sampled_from(["db", "web", "web", "web", "cache"]))}
    if draw(st.booleans()):
        labels["tier"] = draw(st.sampled_from(["x", "y"]))
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels},
            "spec": draw(pod_spec(name, namespace, labels, rich))}  # fmt: skip


def _resources(pod: Obj) -> dict[str, float]:
    reqs, _ = pod_resources(pod["spec"])
    return {"pods": 1.0, **{k: float(v) for k, v in reqs.items()}}


def _fits(node: Obj, need: dict[str, float], used: dict[str, float]) -> bool:
    """Whether a pod needing `need` fits on `node` next to `used` (kube-scheduler put it there)."""
    alloc = node["status"]["allocatable"]
    return all(
        k in alloc and used.get(k, 0.0) + v <= float(parse_quantity(alloc[k])) for k, v in need.items() if v
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Cluster, Obj]:
    """A cluster (nodes, pods bound where they fit, namespaces) and a pending pod to place on it."""
    node_objs = draw(nodes())
    # Replica groups (a Deployment's pods: one template), mostly on a favourite node each: spread and
    # anti-affinity then see crowded domains.
    placements: list[tuple[Obj, Obj]] = []
    for g in range(draw(st.sampled_from([0, 1, 2, 3, 3, 4]))):
        template = draw(pod_object(f"g{g}", rich=False))
        favourite = draw(st.integers(0, len(node_objs) - 1))
        for r in range(draw(st.sampled_from([1, 2, 3, 4, 5, 6]))):
            p = copy.deepcopy(template)
            p["metadata"]["name"] = p["metadata"]["uid"] = f"g{g}-{r}"
            at = favourite if draw(st.booleans()) else draw(st.integers(0, len(node_objs) - 1))
            placements.append((p, node_objs[at]))
    bound: list[Obj] = []
    used: dict[str, dict[str, float]] = {}
    for p, node in placements:
        name = node["metadata"]["name"]
        need, here = _resources(p), used.setdefault(name, {})
        if not _fits(node, need, here):
            continue
        for k, v in need.items():
            here[k] = here.get(k, 0.0) + v
        p["spec"]["nodeName"] = name
        p["status"] = {"phase": "Running"}
        bound.append(p)
    pod = draw(pod_object("incoming", rich=True))
    cluster = Cluster(node_objs, bound, namespace_objects())
    if draw(one_in(3)):
        draw(volumes(cluster, pod))
    return cluster, pod


CLASSES = [
    {"metadata": {"name": "wffc"}, "provisioner": "csi.example.com", "volumeBindingMode": "WaitForFirstConsumer"},
    {"metadata": {"name": "zonal"}, "provisioner": "csi.example.com", "volumeBindingMode": "WaitForFirstConsumer",
     "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["a", "b"]}]}]},
    {"metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
     "volumeBindingMode": "WaitForFirstConsumer"},
    {"metadata": {"name": "immediate"}, "provisioner": "csi.example.com", "volumeBindingMode": "Immediate"},
]  # fmt: skip


@st.composite
def volumes(draw: st.DrawFn, cluster: Cluster, pod: Obj) -> None:
    """StorageClasses, PersistentVolumes (local to a node, zonal, or anywhere; bound, pre-bound or
    available) and the pod's claims (bound, waiting for their first consumer, Immediate and unbound,
    pre-bound, selected for a node, or missing), added to `cluster` and `pod`."""
    ns = pod["metadata"]["namespace"]
    cluster.storage_classes = [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", **c} for c in CLASSES
    ]
    names = [n["metadata"]["name"] for n in cluster.nodes]
    for i in range(draw(st.sampled_from([0, 1, 2, 3, 4]))):
        pv: Obj = {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"pv{i}", "labels": {"disk": draw(st.sampled_from(["ssd", "hdd"]))}},
            "spec": {
                "capacity": {"storage": draw(st.sampled_from(["5Gi", "10Gi", "100Gi"]))},
                "accessModes": draw(st.sampled_from([["ReadWriteOnce"], ["ReadWriteOnce", "ReadOnlyMany"]])),
                "storageClassName": draw(st.sampled_from(["local", "wffc", "local"])),
            },
            "status": {"phase": "Available"},
        }  # fmt: skip
        where = draw(st.sampled_from(["host", "zone", "any", "host"]))
        if where == "host":
            req = {
                "key": "kubernetes.io/hostname",
                "operator": "In",
                "values": [draw(st.sampled_from(names))],
            }
        elif where == "zone":
            req = {
                "key": "topology.kubernetes.io/zone",
                "operator": "In",
                "values": [draw(st.sampled_from(ZONES))],
            }
            pv["metadata"]["labels"]["topology.kubernetes.io/zone"] = req["values"][0]
        if where != "any":
            pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [req]}]}}
        cluster.pvs.append(pv)
    claims = []
    for i in range(draw(st.sampled_from([1, 1, 2]))):
        name = f"data{i}"
        kind = draw(st.sampled_from(["bound", "wffc", "wffc", "immediate", "prebound", "selected", "missing",
                                     "wffc"]))  # fmt: skip
        claims.append(name)
        if kind == "missing":
            continue
        pvc: Obj = {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "annotations": {}},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": draw(st.sampled_from(["1Gi", "10Gi", "50Gi"]))}},
                     "storageClassName": draw(st.sampled_from(["wffc", "zonal", "local", "local"]))},
        }  # fmt: skip
        if draw(one_in(4)):
            pvc["spec"]["selector"] = {"matchLabels": {"disk": "ssd"}}
        free = [pv for pv in cluster.pvs if "claimRef" not in pv["spec"]]
        if kind in ("bound", "prebound") and free:
            pv = draw(st.sampled_from(free))
            pv["spec"]["claimRef"] = {"namespace": ns, "name": name, "uid": f"uid-{name}"}
            pvc["spec"]["storageClassName"] = pv["spec"]["storageClassName"]
            if kind == "bound":
                pvc["spec"]["volumeName"] = pv["metadata"]["name"]
                pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
                pv["status"]["phase"] = "Bound"
        elif kind == "immediate":
            pvc["spec"]["storageClassName"] = draw(st.sampled_from(["immediate", "absent"]))
        elif kind == "selected":
            pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] = draw(
                st.sampled_from(names)
            )
        cluster.pvcs.append(pvc)
    pod["spec"]["volumes"] = [
        SERVICE_ACCOUNT_VOLUME,  # as admission adds it to nearly every pod: next to the claims, never one
        *({"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)),
    ]


# The volume the API server's ServiceAccount admission gives a pod (its token, the cluster CA, its namespace).
SERVICE_ACCOUNT_VOLUME: Obj = {
    "name": "kube-api-access-x7k2q",
    "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]},
}  # fmt: skip


def tessera_feasible(cluster: Cluster, pod: Obj, backend: str = "numpy") -> tuple[set[str], list[str]]:
    """The nodes Tessera finds feasible for `pod` (its filters and inter-pod rules, as the session
    applies them), after reading the cluster through the mirror like watch events; and the cache's
    errors (objects it could not use)."""
    cache = Cache.create(get_namespace(backend), capacity=4)
    events = [WatchEvent("Namespace", "ADDED", ns) for ns in cluster.namespaces]
    events += [WatchEvent("Node", "ADDED", n) for n in cluster.nodes]
    events += [WatchEvent("Pod", "ADDED", copy.deepcopy(p)) for p in cluster.pods]
    for kind, objs in (("StorageClass", cluster.storage_classes), ("PersistentVolume", cluster.pvs),
                       ("PersistentVolumeClaim", cluster.pvcs)):  # fmt: skip
        events += [WatchEvent(kind, "ADDED", copy.deepcopy(o)) for o in objs]  # type: ignore[arg-type]
    cache.apply(events)
    info = parse_pod(copy.deepcopy(pod))
    if info.error:
        return set(), [info.error]
    d = demand_for(info)
    s = cache.state
    mask, _ = feasible(s, d)
    rules = cache.pod_mask(d)  # volumes and inter-pod rules, as Session.excluded applies them
    if rules is not None:
        mask = mask & rules

    return {str(s.node_names[r]) for r in range(s.num_rows) if bool(mask[r])}, cache.errors
