"""KAI Scheduler's Queue and PodGroup, translated into Tessera's: table tests over the examples of KAI's
documentation (its quickstart queues, the queue page's examples, its pod group examples), rewritten here
by hand in the same shape; KAI's status shape; and the simulator reading KAI manifests as the scheduler
reads them (same placements as the equivalent Tessera manifests)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.api.kai import (
    NEVER_S,
    kai_podgroup_status,
    kai_queue_status,
    parse_go_duration,
    resource_list,
    translate,
)
from scheduler.api.keys import TRANSLATED_FROM
from scheduler.api.meta import Condition
from scheduler.api.podgroup import PodGroup, PodGroupStatus
from scheduler.api.queue import Queue, QueueStatus
from scheduler.cycle import Scheduler, SchedulerConfig
from scheduler.sim.cluster import SimCluster
from scheduler.sim.loader import load_documents, load_files
from scheduler.sim.runner import run_simulation

ROOT = Path(__file__).resolve().parents[2]
KAI_EXAMPLES = ROOT / "examples" / "kai"
KAI_CLUSTER = ROOT / "examples" / "simulate" / "kai-cluster.yaml"  # examples/kai holds no Nodes
MB_IN_MIB = 1e6 / 2**20

Obj = dict[str, Any]


def kai_queue(name: str, spec: Obj) -> Obj:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def kai_group(name: str, spec: Obj, namespace: str = "ml", labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "labels": labels or {}}
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": meta, "spec": spec}


def res(quota: float, limit: float, weight: float = 1) -> Obj:
    return {"quota": quota, "limit": limit, "overQuotaWeight": weight}


QUICKSTART_PARENT = kai_queue(
    "default-parent-queue", {"resources": {r: res(0, -1) for r in ("cpu", "gpu", "memory")}}
)

# (name, KAI Queue, expected Tessera figures per resource as (quota, limit, weight) in internal units
#  (GPUs, millicores, MiB), expected parent, priority, and words each note must contain)
QUEUE_CASES: list[tuple[str, Obj, dict[str, tuple[float, float, float]], str | None, int, list[str]]] = [
    (
        "quickstart parent: no quota, no limit",
        QUICKSTART_PARENT,
        {"gpu": (0, -1, 1), "cpu": (0, -1, 1), "memory": (0, -1, 1)},
        None, 100, [],
    ),
    (
        "quickstart leaf under the parent",
        kai_queue("default-queue", {"parentQueue": "default-parent-queue",
                                    "resources": {r: res(0, -1) for r in ("cpu", "gpu", "memory")}}),
        {"gpu": (0, -1, 1), "cpu": (0, -1, 1), "memory": (0, -1, 1)},
        "default-parent-queue", 100, [],
    ),
    (
        "queue page, every resource: millicores and MB",
        kai_queue("example-queue", {"displayName": "Example Queue", "parentQueue": "parent-queue", "priority": 100,
                                    "resources": {"cpu": res(2000, 4000), "memory": res(4096, 8192),
                                                  "gpu": res(2, 4)}}),
        {"gpu": (2, 4, 1), "cpu": (2000, 4000, 1), "memory": (4096 * MB_IN_MIB, 8192 * MB_IN_MIB, 1)},
        "parent-queue", 100, [],
    ),
    (
        "queue page, basic queue: no memory block, no weights",
        kai_queue("research-team", {"displayName": "Research Team",
                                    "resources": {"cpu": {"quota": 1000, "limit": 2000},
                                                  "gpu": {"quota": 1, "limit": 2}}}),
        {"gpu": (1, 2, 0), "cpu": (1000, 2000, 0), "memory": (0, 0, 0)},
        None, 100, ["spec.resources.memory is not set: KAI reads it as quota 0, limit 0"],
    ),
    (
        "queue page, hierarchical queue: quota without a limit is worth the limit, 0",
        kai_queue("ml-team", {"displayName": "ML Team", "parentQueue": "research-team", "priority": 200,
                              "resources": {"cpu": {"quota": 500, "overQuotaWeight": 2},
                                            "gpu": {"quota": 1, "overQuotaWeight": 1}}}),
        {"gpu": (0, 0, 1), "cpu": (0, 0, 2), "memory": (0, 0, 0)},
        "research-team", 200,
        ["gpu: quota 1 is above limit 0", "cpu: quota 500 is above limit 0", "spec.resources.memory is not set"],
    ),
    (
        "queue page, unlimited queue",
        kai_queue("burst-queue", {"resources": {"cpu": {"quota": -1, "limit": -1},
                                                "gpu": {"quota": 0, "limit": -1}}}),
        {"gpu": (0, -1, 0), "cpu": (-1, -1, 0), "memory": (0, 0, 0)},
        None, 100, ["spec.resources.memory is not set"],
    ),
    (
        "priority page, a limited queue: quota -1 with a limit is the limit",
        kai_queue("test", {"parentQueue": "default",
                           "resources": {"cpu": res(-1, -1), "gpu": res(1, 1), "memory": res(-1, 4000)}}),
        {"gpu": (1, 1, 1), "cpu": (-1, -1, 1), "memory": (4000 * MB_IN_MIB, 4000 * MB_IN_MIB, 1)},
        "default", 100, [],
    ),
    (
        "fractions: half a GPU, 250.5 millicores, 0.5 MB",
        kai_queue("tiny", {"resources": {"gpu": res(0.5, 1.5), "cpu": res(250.5, -1), "memory": res(0.5, -1)}}),
        {"gpu": (0.5, 1.5, 1), "cpu": (250.5, -1, 1), "memory": (0.5 * MB_IN_MIB, -1, 1)},
        None, 100, [],
    ),
    (
        "fields Tessera does not use are named; minimum runtimes carry over",
        kai_queue("slow", {"preemptMinRuntime": "10m", "reclaimMinRuntime": "1h", "futureField": 3,
                           "resources": {r: {**res(1, -1), "lendingLimit": 0} for r in ("cpu", "gpu", "memory")}}),
        {"gpu": (1, -1, 1), "cpu": (1, -1, 1), "memory": (MB_IN_MIB, -1, 1)},
        None, 100,
        ["spec.futureField is not known",
         "gpu.lendingLimit", "cpu.lendingLimit", "memory.lendingLimit"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "kai", "figures", "parent", "priority", "noted"), QUEUE_CASES, ids=[c[0] for c in QUEUE_CASES]
)
def test_kai_queue_translation(
    case: str,
    kai: Obj,
    figures: dict[str, tuple[float, float, float]],
    parent: str | None,
    priority: int,
    noted: list[str],
) -> None:
    t = translate(kai)
    assert t.kind == "Queue"
    q = Queue.model_validate(t.obj)
    assert q.name == kai["metadata"]["name"]
    assert q.metadata.annotations[TRANSLATED_FROM] == "scheduling.run.ai/v2"
    assert q.spec.parent_queue == parent and q.spec.priority == priority
    assert q.spec.display_name == kai["spec"].get("displayName")
    for name, (quota, limit, weight) in figures.items():
        r = getattr(q.spec.resources, name)
        assert (r.quota, r.limit, r.over_quota_weight) == pytest.approx((quota, limit, weight)), name
    assert len(t.notes) == len(noted), t.notes
    for words in noted:
        assert any(words in n for n in t.notes), (words, t.notes)


@pytest.mark.parametrize(
    ("kai_resources", "complaint"),
    [
        ({"gpu": {"quota": "2"}}, "valid number"),  # the CRD's type is number: a string is refused
        ({"cpu": {"limit": True}}, "valid number"),
        ({"memory": {"quota": -2}}, r"-1 \(unlimited\) or >= 0"),
        ({"gpu": {"quota": float("nan")}}, "finite"),
        ({"gpu": {"overQuotaWeight": -1}}, "greater than or equal to 0"),
    ],
)
def test_kai_queue_rejects_what_kai_would(kai_resources: Obj, complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        translate(kai_queue("bad", {"resources": kai_resources}))


# (name, KAI PodGroup, expected Tessera spec fields, words each note must contain)
GROUP_CASES: list[tuple[str, Obj, Obj, list[str]]] = [
    (
        "a gang of three in a queue",
        kai_group("ddp", {"minMember": 3, "queue": "team-a", "priorityClassName": "train"}),
        {"minMember": 3, "queue": "team-a", "priorityClassName": "train"}, [],
    ),
    (
        "external pod group with one subgroup",
        kai_group("external-batch-job", {"minMember": 2, "queue": "default-queue",
                                         "subGroups": [{"name": "workers", "minMember": 2}]}),
        {"minMember": 2, "queue": "default-queue"}, ["subGroups are not used by Tessera yet: the gang is minMember (2)"],
    ),
    (
        "staleness grace period and preemptibility",
        kai_group("stale-gang", {"queue": "default-queue", "minMember": 2, "stalenessGracePeriod": "30s",
                                 "preemptibility": "non-preemptible"},
                  labels={"kai.scheduler/queue": "default-queue"}),
        {"minMember": 2, "queue": "default-queue", "staleGraceSeconds": 30, "preemptibility": "non-preemptible"},
        [],
    ),
    (
        "a negative grace period: never evicted",
        kai_group("keep", {"queue": "q", "minMember": 2, "stalenessGracePeriod": "-1s"}),
        {"minMember": 2, "queue": "q", "staleGraceSeconds": NEVER_S}, [],
    ),
    (
        "subgroups without minMember: the leaves add up",
        kai_group("pipeline", {"queue": "q", "minSubGroup": 2, "subGroups": [
            {"name": "stage", "minMember": 0},
            {"name": "rack-workers", "parent": "stage", "minMember": 3,
             "topologyConstraint": {"topology": "rack-topology", "requiredTopologyLevel": "rack"}},
            {"name": "zone-workers", "parent": "stage", "minMember": 2}]}),
        {"minMember": 5, "queue": "q"},
        ["leaf subgroups' minMember add up", "spec.minSubGroup", "subGroups' topologyConstraint is not used"],
    ),
    (
        "the gang's topology constraint is carried over (KAI's field names are Tessera's)",
        kai_group("ddp", {"queue": "q", "minMember": 4, "topologyConstraint": {
            "topology": "cluster-topology", "requiredTopologyLevel": "rack", "preferredTopologyLevel": ""}}),
        {"minMember": 4, "queue": "q",
         "topologyConstraint": {"topology": "cluster-topology", "requiredTopologyLevel": "rack"}}, [],
    ),
    (
        "no queue: the label, as KAI's podgrouper would have written it",
        kai_group("labelled", {"minMember": 2}, labels={"kai.scheduler/queue": "team-b"}),
        {"minMember": 2, "queue": "team-b"}, ["spec.queue is not set"],
    ),
    (
        "no queue, no label, no minMember: Tessera's default queue, a group of one",
        kai_group("bare", {}),
        {"minMember": 1, "queue": "default"}, ["spec.queue is not set"],
    ),
    (
        "what KAI does with pods that Tessera does not yet",
        kai_group("misc", {"minMember": 1, "queue": "q", "markUnschedulable": False, "schedulingBackoff": 1,
                           "preemptionDelay": "5m", "topologyConstraint": {"preferredTopologyLevel": "zone"},
                           "somethingNew": {"a": 1}}),
        {"minMember": 1, "queue": "q"},
        ["markUnschedulable", "schedulingBackoff", "preemptionDelay", "topologyConstraint",
         "spec.somethingNew is not known"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("case", "kai", "spec", "noted"), GROUP_CASES, ids=[c[0] for c in GROUP_CASES])
def test_kai_podgroup_translation(case: str, kai: Obj, spec: Obj, noted: list[str]) -> None:
    t = translate(kai)
    assert t.kind == "PodGroup"
    assert t.obj["spec"] == spec
    g = PodGroup.model_validate(t.obj)
    assert (g.metadata.namespace, g.metadata.name) == ("ml", kai["metadata"]["name"])
    assert g.metadata.annotations[TRANSLATED_FROM] == "scheduling.run.ai/v2alpha2"
    assert len(t.notes) == len(noted), t.notes
    for words in noted:
        assert any(words in n for n in t.notes), (words, t.notes)


@pytest.mark.parametrize(
    "obj",
    [
        kai_group("bad", {"minMember": -1}),
        kai_group("bad", {"preemptibility": "sometimes"}),
        kai_group("bad", {"stalenessGracePeriod": "soon"}),
        {**kai_queue("q", {}), "apiVersion": "scheduling.run.ai/v1"},
        {**kai_queue("q", {}), "kind": "Topology"},
    ],
)
def test_kai_objects_tessera_cannot_read_are_refused_with_a_reason(obj: Obj) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        translate(obj)


def test_go_durations() -> None:
    assert parse_go_duration("30s") == 30
    assert parse_go_duration("1h30m") == 5400
    assert parse_go_duration("1.5m") == 90
    assert parse_go_duration("250ms") == pytest.approx(0.25)
    assert parse_go_duration("-1s") == -1
    assert parse_go_duration("0") == 0
    for bad in ("", "30", "1d", "s", "1h 30m"):
        with pytest.raises(ValueError):
            parse_go_duration(bad)


def test_translation_does_not_change_the_kai_object() -> None:
    kai = kai_group("ddp", {"minMember": 3, "queue": "team-a"}, labels={"app": "x"})
    before = copy.deepcopy(kai)
    translate(kai)
    assert kai == before


# ---- status in KAI's shape -----------------------------------------------------------------------------
def test_queue_status_is_a_kai_resource_list() -> None:
    status = QueueStatus.from_internal(
        allocated={"gpu": 2.5, "cpu": 4500.0, "memory": 1024.0},
        requested={"gpu": 3.0, "cpu": 8000.0, "memory": 238.4185791015625},  # 250M of a KAI pod
        fair_share={"gpu": 3.0, "cpu": 8000.0, "memory": 2048.0},
    )
    out = kai_queue_status(status, ["team-b", "team-a", "team-a"])
    assert out == {
        "allocated": {"nvidia.com/gpu": "2500m", "cpu": "4500m", "memory": str(1024 * 2**20)},
        "requested": {"nvidia.com/gpu": "3", "cpu": "8", "memory": "250000000"},
        "childQueues": ["team-a", "team-b"],
    }
    assert kai_queue_status(status, [])["childQueues"] is None  # removes the field
    assert resource_list({}) == {}


def test_podgroup_status_is_kais_scheduling_condition() -> None:
    waiting = PodGroupStatus(
        phase="Unschedulable",
        conditions=[Condition(type="Schedulable", status="False", reason="GangUnschedulable", message="m1")],
    )
    first = kai_podgroup_status(waiting, None, "2026-01-01T00:00:00Z")["schedulingConditions"]
    assert first == [{
        "type": "UnschedulableOnNodePool", "nodePool": "default", "reason": "Unschedulable", "message": "m1",
        "status": "True", "transitionID": "1", "lastTransitionTime": "2026-01-01T00:00:00Z",
        "reasons": [{"reason": "GangUnschedulable", "message": "m1"}],
    }]  # fmt: skip
    again = kai_podgroup_status(waiting, first, "2026-01-01T00:05:00Z")["schedulingConditions"]
    assert again == first  # nothing changed: same transition, same time
    moved = waiting.model_copy(
        update={
            "conditions": [Condition(type="Schedulable", status="False", reason="OverQuota", message="m2")]
        }
    )
    second = kai_podgroup_status(moved, first, "2026-01-01T00:06:00Z")["schedulingConditions"]
    assert (second[0]["transitionID"], second[0]["lastTransitionTime"]) == ("2", "2026-01-01T00:06:00Z")
    running = PodGroupStatus(phase="Running", running=3)
    assert kai_podgroup_status(running, second, "now") == {"schedulingConditions": None}


# ---- the simulator reads KAI manifests ------------------------------------------------------------------
def placements(manifests: Any) -> dict[str, tuple[str | None, tuple[tuple[int, int], ...]]]:
    sim = SimCluster.from_manifests(manifests)
    scheduler = Scheduler(sim, SchedulerConfig(policy="binpack", expected_nodes=16))
    run_simulation(sim, scheduler, until_s=30)
    out = {}
    for key, rec in sim.pods.items():
        node = rec.obj["spec"].get("nodeName")
        pl = scheduler.cache.placements.get(rec.obj["metadata"].get("uid", ""))
        gpus = tuple((g.slot, g.milli) for g in pl.gpus) if pl is not None else ()
        out[key] = (node, gpus)
    return out


def tessera_equivalent(docs: list[Obj]) -> list[Obj]:
    """The KAI example written the Tessera way, by hand: Tessera's Queues in cores and quantities, pods of
    schedulerName tessera with Tessera's label and annotation, a Tessera PodGroup."""
    unlimited = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    none = {"quota": 0, "overQuotaWeight": 1, "limit": -1}
    queues = [
        ("default-parent-queue", None, {"gpu": none, "cpu": none, "memory": none}, 100),
        ("default-queue", "default-parent-queue", {"gpu": none, "cpu": none, "memory": none}, 100),
        ("research", None, {"gpu": {"quota": 8, "overQuotaWeight": 1, "limit": -1},
                            "cpu": unlimited, "memory": unlimited}, 100),
        ("team-a", "research", {"gpu": {"quota": 4, "overQuotaWeight": 1, "limit": 6},
                                "cpu": {"quota": 16, "overQuotaWeight": 1, "limit": -1},
                                "memory": {"quota": "65536M", "overQuotaWeight": 1, "limit": -1}}, 100),
        ("team-b", "research", {"gpu": {"quota": 4, "overQuotaWeight": 2, "limit": -1},
                                "cpu": unlimited, "memory": unlimited}, 100),
    ]  # fmt: skip
    out: list[Obj] = []
    for name, parent, resources, priority in queues:
        spec: Obj = {"priority": priority, "resources": resources}
        if parent:
            spec["parentQueue"] = parent
        out.append({"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "Queue",
                    "metadata": {"name": name}, "spec": spec})  # fmt: skip
    out.append({"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "ddp", "namespace": "team-a"},
                "spec": {"minMember": 3, "queue": "team-a", "priorityClassName": "train"}})  # fmt: skip
    for doc in docs:
        if doc["kind"] not in ("Pod", "Job", "Node"):
            continue
        doc = copy.deepcopy(doc)
        pod = doc["spec"]["template"] if doc["kind"] == "Job" else doc
        if doc["kind"] != "Node":
            meta = pod.setdefault("metadata", {})
            meta["labels"] = {"tessera.dev/queue": meta["labels"].pop("kai.scheduler/queue")}
            notes = meta.get("annotations") or {}
            if "pod-group-name" in notes:
                notes["tessera.dev/pod-group"] = notes.pop("pod-group-name")
            pod["spec"]["schedulerName"] = "tessera"
        out.append(doc)
    return out


def _kai_docs() -> list[Obj]:
    import yaml

    files = [KAI_CLUSTER, *sorted(KAI_EXAMPLES.glob("*.yaml"))]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def test_simulate_kai_manifests_places_as_the_equivalent_tessera_manifests() -> None:
    kai = load_files([KAI_CLUSTER, KAI_EXAMPLES])
    # One line for all of them, and none for the Namespace (a cluster needs it, the simulation does not).
    assert kai.warnings == ["8 pods of schedulerName kai-scheduler are simulated as Tessera's"]
    tessera = load_documents(tessera_equivalent(_kai_docs()), "tessera-equivalent")
    assert len(kai.objects["Queue"]) == len(tessera.objects["Queue"]) == 5
    got, want = placements(kai), placements(tessera)
    assert got == want
    assert len(got) == 8 and all(node for node, _ in got.values())  # everything fits: 6.5 GPUs of 8
    ddp = [got[f"team-a/ddp-{i}"] for i in range(3)]
    assert sum(milli for _, gpus in ddp for _, milli in gpus) == 3000
    assert [milli for _, gpus in [got["default/gpu-sharing"]] for _, milli in gpus] == [500]


def test_kai_gang_is_placed_whole_or_not_at_all_in_the_simulator() -> None:
    """The KAI PodGroup's minMember makes the gang: 3 workers, one node with 2 free GPUs, nobody starts."""
    docs = [
        d for d in _kai_docs() if d["kind"] in ("Node", "Queue", "PodGroup") or d["metadata"]["name"] == "ddp"
    ]
    docs = [d for d in docs if not (d["kind"] == "Node" and d["metadata"]["name"] == "gpu-1")]
    (node,) = [d for d in docs if d["kind"] == "Node"]
    node["status"]["capacity"]["nvidia.com/gpu"] = "2"
    manifests = load_documents(docs, "kai")
    sim = SimCluster.from_manifests(manifests)
    scheduler = Scheduler(sim, SchedulerConfig(policy="binpack", expected_nodes=16))
    run_simulation(sim, scheduler, until_s=30)
    ddp = [sim.pods[f"team-a/ddp-{i}"] for i in range(3)]
    assert [rec.obj["spec"].get("nodeName") for rec in ddp] == [None, None, None]
    assert scheduler.cache.state.allocated_milli() == 0
    assert all(rec.reason and "gang" in rec.reason[1].lower() for rec in ddp), [r.reason for r in ddp]


def test_same_name_tessera_wins_in_the_simulator_with_a_warning() -> None:
    tessera_q = {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "team-a"},
                 "spec": {"resources": {"gpu": {"quota": 1}}}}  # fmt: skip
    kai_q = kai_queue("team-a", {"resources": {r: res(5, -1) for r in ("cpu", "gpu", "memory")}})
    for order in ([kai_q, tessera_q], [tessera_q, kai_q]):
        m = load_documents(copy.deepcopy(order), "f.yaml")
        (q,) = m.objects["Queue"]
        assert Queue.model_validate(q).spec.resources.gpu.quota == 1
        assert any(
            "KAI Queue team-a is ignored: Tessera's Queue of the same name is used" in w for w in m.warnings
        )
    # across files too
    both = load_documents([kai_q], "a.yaml")
    both.extend(load_documents([tessera_q], "b.yaml"))
    (q,) = both.objects["Queue"]
    assert TRANSLATED_FROM not in q["metadata"].get("annotations", {})


def test_a_bad_kai_object_is_skipped_with_its_reason_and_the_rest_loads() -> None:
    m = load_documents([kai_queue("bad", {"resources": {"gpu": {"quota": "lots"}}}),
                        kai_queue("good", {"resources": {r: res(1, -1) for r in ("cpu", "gpu", "memory")}})],
                       "q.yaml")  # fmt: skip
    assert [q["metadata"]["name"] for q in m.objects["Queue"]] == ["good"]
    (warning,) = [w for w in m.warnings if "bad" in w]
    assert "q.yaml: document 1: Queue bad: spec.resources.gpu.quota" in warning and warning.endswith(
        "skipped"
    )


def test_kai_min_runtimes_carry_over_and_bad_ones_are_refused() -> None:
    out = translate(kai_queue("slow", {"preemptMinRuntime": "10m", "reclaimMinRuntime": "1h30m"}))
    spec = Queue.model_validate(out.obj).spec
    assert (spec.preempt_min_runtime_s, spec.reclaim_min_runtime_s) == (600, 5400)
    assert not any("MinRuntime" in n for n in out.notes)  # used as KAI means them: nothing to warn about
    with pytest.raises(ValueError, match="cannot be negative"):
        translate(
            kai_queue("neg", {"reclaimMinRuntime": "-5s"})
        )  # KAI's server takes it; it protects nothing
