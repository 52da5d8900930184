"""The CEL in the chart, evaluated: webhook matchConditions and the Queue CRD's validation rule.

The API server runs these expressions with cel-go; here `cel-python` evaluates them on the admission
requests and objects they will see, so a wrong condition (a webhook that never fires, or one that catches
every pod in the cluster) fails a test instead of a cluster.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.api import QueueResource
from scheduler.api.keys import GPU_ALLOCATED, GPU_ASSIGNMENT
from tests.deploy.deploy_support import Manifest, crd_by_kind, one

celpy = pytest.importorskip("celpy", reason="evaluating CEL needs cel-python (pip install cel-python)")

SCHEDULER_USER = "system:serviceaccount:tessera-system:tessera-scheduler"


def evaluate(expression: str, activation: dict[str, Any]) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    result = program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
    assert isinstance(result, celpy.celtypes.BoolType), f"{expression!r} gave {result!r}, not a bool"
    return bool(result)


def pod(scheduler: str | None = "tessera", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    meta: dict[str, Any] = {"name": "p", "namespace": "ml"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def request(operation: str, obj: dict[str, Any], old: dict[str, Any] | None, user: str) -> dict[str, Any]:
    return {
        "object": obj,
        "oldObject": old,
        "request": {"operation": operation, "userInfo": {"username": user}},
    }


def webhook_fires(hook: Manifest, activation: dict[str, Any]) -> bool:
    """A webhook is called when its rules match (the operation, the object's kind) and every matchCondition
    is true."""
    rule = hook["rules"][0]
    plural = {"Pod": "pods", "PodGroup": "podgroups"}[activation["object"]["kind"]]
    if activation["request"]["operation"] not in rule["operations"] or plural not in rule["resources"]:
        return False
    return all(evaluate(c["expression"], activation) for c in hook.get("matchConditions", []))


def hooks(objects: list[Manifest]) -> dict[str, Manifest]:
    return {
        h["name"]: h
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for h in one(objects, kind)["webhooks"]
    }


ASSIGNED = {GPU_ASSIGNMENT: '{"node":"n1","gpus":[]}'}
OTHER_ASSIGNMENT = {GPU_ASSIGNMENT: '{"node":"n2","gpus":[]}'}
ALLOCATED = {**ASSIGNED, GPU_ALLOCATED: "2026-01-01T00:00:00Z"}
PLUGIN_USER = "system:serviceaccount:tessera-system:tessera-device-plugin"
VALIDATE, MUTATE, GUARD, GROUPS = (
    "pods.validate.tessera.dev",
    "pods.mutate.tessera.dev",
    "pods-assignment.validate.tessera.dev",
    "podgroups.validate.tessera.dev",
)


def podgroup(queue: str = "team") -> dict[str, Any]:
    return {"apiVersion": "scheduling.tessera.dev/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 2, "queue": queue}}  # fmt: skip


def with_slice(obj: dict[str, Any], where: str = "containers", field: str = "limits") -> dict[str, Any]:
    obj["spec"].setdefault(where, [{"name": "c", "image": "x"}])
    obj["spec"][where][0]["resources"] = {field: {"tessera.dev/gpu-slice": "1"}}
    return obj


# (what happens, operation, new object, old object, user) -> which webhooks must fire
SCENARIOS: list[tuple[str, str, dict[str, Any], dict[str, Any] | None, str, set[str]]] = [
    ("user creates a tessera pod", "CREATE", pod(), None, "alice", {MUTATE, VALIDATE}),
    ("user creates a default-scheduler pod", "CREATE", pod("default-scheduler"), None, "alice", set()),
    ("pod without schedulerName", "CREATE", pod(None), None, "alice", set()),
    ("user creates a pod carrying an assignment", "CREATE", pod(annotations=ASSIGNED), None, "alice",
     {MUTATE, VALIDATE, GUARD}),
    ("user presets gpu-allocated", "CREATE", pod(annotations=ALLOCATED), None, "alice", {MUTATE, VALIDATE, GUARD}),
    ("another scheduler's pod asks for gpu-slice", "CREATE", with_slice(pod("default-scheduler")), None,
     "alice", {VALIDATE}),
    ("... in an init container's requests", "CREATE",
     with_slice(pod("default-scheduler"), "initContainers", "requests"), None, "alice", {VALIDATE}),
    ("scheduler writes the assignment", "UPDATE", pod(annotations=ASSIGNED), pod(annotations={}),
     SCHEDULER_USER, set()),
    ("user forges an assignment", "UPDATE", pod(annotations=ASSIGNED), pod(), "alice", {VALIDATE, GUARD}),
    ("user rewrites an assignment", "UPDATE", pod(annotations=OTHER_ASSIGNMENT), pod(annotations=ASSIGNED),
     "alice", {VALIDATE, GUARD}),
    ("user removes an assignment", "UPDATE", pod(annotations={}), pod(annotations=ASSIGNED), "alice",
     {VALIDATE, GUARD}),
    ("user relabels a tessera pod", "UPDATE", pod(annotations={"a": "b"}), pod(), "alice", {VALIDATE}),
    ("device plugin marks the pod allocated", "UPDATE", pod(annotations=ALLOCATED), pod(annotations=ASSIGNED),
     PLUGIN_USER, {VALIDATE}),
    ("user marks another scheduler's pod allocated", "UPDATE", pod("default-scheduler", ALLOCATED),
     pod("default-scheduler", ASSIGNED), "alice", {GUARD}),
    ("the agent's account marks a pod allocated", "UPDATE", pod("default-scheduler", ALLOCATED),
     pod("default-scheduler", ASSIGNED), "system:serviceaccount:tessera-system:tessera-agent", {GUARD}),
    ("a controller relabels any pod", "UPDATE", pod("default-scheduler", {"a": "b"}), pod("default-scheduler"),
     "system:serviceaccount:kube-system:job-controller", set()),
    ("user creates a PodGroup", "CREATE", podgroup(), None, "alice", {GROUPS}),
    ("user edits a PodGroup", "UPDATE", podgroup("other"), podgroup(), "alice", {GROUPS}),
    ("the podgrouper writes a PodGroup", "UPDATE", podgroup("other"), podgroup(), SCHEDULER_USER, set()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "operation", "new", "old", "user", "expected"), SCENARIOS, ids=[s[0] for s in SCENARIOS]
)
def test_webhooks_fire_exactly_when_they_should(
    default_objects: list[Manifest],
    what: str,
    operation: str,
    new: dict[str, Any],
    old: dict[str, Any] | None,
    user: str,
    expected: set[str],
) -> None:
    activation = request(operation, new, old, user)
    fired = {name for name, hook in hooks(default_objects).items() if webhook_fires(hook, activation)}
    assert fired == expected, what


def test_conditions_follow_the_scheduler_name(render: Callable[..., list[Manifest]]) -> None:
    objects = render({"schedulerName": "gpu-batch"})
    mutate = hooks(objects)["pods.mutate.tessera.dev"]
    assert webhook_fires(mutate, request("CREATE", pod("gpu-batch"), None, "alice"))
    assert not webhook_fires(mutate, request("CREATE", pod("tessera"), None, "alice"))
    guard = hooks(render({}, release="x", namespace="gpu"))["pods-assignment.validate.tessera.dev"]
    forged = request(
        "UPDATE", pod(annotations=ASSIGNED), pod(), "system:serviceaccount:gpu:x-tessera-scheduler"
    )
    assert not webhook_fires(guard, forged), "the renamed scheduler account must be allowed"


def _queue_rules() -> list[str]:
    """The GPU rule (numbers). cpu and memory are quantities compared with Kubernetes' CEL quantity
    library, which cel-python lacks: tests/deploy/test_deploy_queue_units.py checks them on the real
    API server."""
    schema = crd_by_kind()["Queue"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    gpu = schema["properties"]["spec"]["properties"]["resources"]["properties"]["gpu"]
    rules = {r["rule"] for r in gpu.get("x-kubernetes-validations", [])}
    assert len(rules) == 1
    return sorted(rules)


_VALUES = [-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 4.0, 8.0]


@pytest.mark.parametrize(("quota", "limit"), list(itertools.product(_VALUES, _VALUES)))
def test_queue_rule_agrees_with_the_model(quota: float, limit: float) -> None:
    """Schema checks plus the CEL rule accept a resource exactly when the pydantic model does."""
    single_field_ok = all(v == -1 or v >= 0 for v in (quota, limit))  # the schema's anyOf
    # Kubernetes hands `number` fields to CEL as doubles.
    cel_ok = all(evaluate(rule, {"self": {"quota": quota, "limit": limit}}) for rule in _queue_rules())
    try:
        QueueResource.model_validate({"quota": quota, "limit": limit})
        model_ok = True
    except ValidationError:
        model_ok = False
    assert (single_field_ok and cel_ok) == model_ok


# (levels, accepted): the Topology CRD's CEL rules on its level list agree with the model's validator.
_LEVELS = [
    ([{"nodeLabel": "zone"}, {"nodeLabel": "rack"}], True),
    ([{"nodeLabel": "zone"}, {"nodeLabel": "zone"}], False),
    ([{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "rack"}], False),
    ([{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}], True),
    ([{"nodeLabel": "a/zone", "alias": "zone"}, {"nodeLabel": "a/rack", "alias": "rack"}], True),
    ([{"nodeLabel": "a/zone", "alias": "x"}, {"nodeLabel": "a/rack", "alias": "x"}], False),
    ([{"nodeLabel": "a/zone", "alias": "a/rack"}, {"nodeLabel": "a/rack"}], False),
]


@pytest.mark.parametrize(("levels", "accepted"), _LEVELS)
def test_topology_rules_agree_with_the_model(levels: list[dict[str, str]], accepted: bool) -> None:
    from scheduler.api.topology import TopologySpec

    schema = crd_by_kind()["Topology"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = schema["properties"]["spec"]["properties"]["levels"]["x-kubernetes-validations"]
    cel_ok = all(evaluate(r["rule"], {"self": levels}) for r in rules)
    try:
        TopologySpec.model_validate({"levels": levels})
        model_ok = True
    except ValidationError:
        model_ok = False
    assert cel_ok == model_ok == accepted
