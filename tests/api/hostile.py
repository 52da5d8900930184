"""Hypothesis strategies for hostile Kubernetes objects: numbers no one should write, values of the wrong
shape where a map or a list belongs, and well-formed objects carrying them, as a careless user or an
attacker would send them. Shared by the parser, webhook and cycle fuzz tests.

Example counts: `FUZZ_EXAMPLES` (default a few hundred, what CI runs); for long runs:

    TESSERA_FUZZ_EXAMPLES=10000 python -m pytest -q -p no:cacheprovider \
        tests/api/test_fuzz_parser.py tests/webhook/test_webhook_fuzz.py tests/api/test_fuzz_cycle.py

(docs/limits.md shows the same command).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from scheduler.api.keys import (
    GPU_ALLOCATED,
    GPU_ASSIGNMENT,
    GPU_FRACTION,
    GPU_FRACTION_NUM_DEVICES,
    GPU_MEMORY,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_SLICE_RESOURCE,
    KAI_QUEUE_LABEL,
    POD_GROUP,
    QUEUE_LABEL,
    WHOLE_GPU_RESOURCE,
)

FUZZ_EXAMPLES = int(os.environ.get("TESSERA_FUZZ_EXAMPLES", "300"))


def fuzz_settings(scale: float = 1.0) -> Any:
    return settings(
        max_examples=max(10, int(FUZZ_EXAMPLES * scale)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


_DIGITS = st.sampled_from("0123456789")
# Digits of other scripts (Arabic-Indic, full-width, Devanagari...) that Python's int()/float() accept.
_FOREIGN_DIGITS = st.sampled_from("٠١٢٣٤٥٦٧٨٩０１２３４５６７８９०१२३४५६७८९۰۱۲")

number_text = st.one_of(
    st.sampled_from(
        [
            "0",
            "1",
            "0.5",
            ".5",
            "5.",
            "-1",
            "+1",
            "1e3",
            "5e-1",
            "1E-400",
            "1e99999",
            "nan",
            "NaN",
            "inf",
            "-inf",
            "Infinity",
            "1_000",
            "0x10",
            "0b1",
            "1/2",
            "½",
            "",
            " ",
            "0.5\u3000",
            "\u20070.5",
            "٠.٥",
            "０.５",
            "1.5",
            "0.9999",
            "0.0001",
            "1e-9",
            "9" * 19,
            "9" * 4000,
            "-" + "9" * 30,
            "1K",
            "1Ki",
            "1ki",
            "16Gi",
            "500m",
            "2E",
            "1e",
            "--1",
            "1..2",
            "0.5\x00",
            "true",
            "null",
            "[]",
        ]
    ),
    st.text(_DIGITS, min_size=1, max_size=40),
    st.text(_FOREIGN_DIGITS, min_size=1, max_size=5),
    st.builds(lambda a, b: f"{a}.{b}", st.text(_DIGITS, max_size=5), st.text(_DIGITS, max_size=5)),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)

json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8), number_text,
)  # fmt: skip
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
quantity_value = st.one_of(number_text, json_scalar, st.sampled_from([[1], {"a": 1}]))


# Node names hostile pods may be bound to: the fuzzed cycles' good node, hostile nodes, nodes never seen.
NODE_NAMES = ["good-0", "n1", "n2", "missing"]


@st.composite
def assignment_text(draw: st.DrawFn) -> str:
    """A `tessera.dev/gpu-assignment` value: well-formed JSON with numbers from anywhere."""
    import json

    gpus = [
        {"index": draw(st.one_of(st.integers(-2, 70), json_scalar)),
         "milli": draw(st.one_of(st.integers(-5, 1200), json_scalar)),
         "memoryMiB": draw(st.one_of(st.integers(-5, 2**40), json_scalar))}
        for _ in range(draw(st.integers(0, 3)))
    ]  # fmt: skip
    node = draw(st.sampled_from(NODE_NAMES))
    return json.dumps({"node": node, "gpus": gpus, "assumedAt": "2026-01-01T00:00:00Z"}, default=str)


@st.composite
def hostile_pod(draw: st.DrawFn, *, name: str | None = None, namespace: str = "default") -> dict[str, Any]:
    """A pod of the Tessera scheduler (mostly) with hostile numbers and, sometimes, hostile shapes."""
    annotations: dict[str, Any] = {}
    for key in (GPU_FRACTION, GPU_MEMORY, GPU_FRACTION_NUM_DEVICES):
        if draw(st.booleans()):
            annotations[key] = draw(number_text)
    if draw(st.integers(0, 9)) == 0:
        annotations[draw(st.sampled_from([GPU_ASSIGNMENT, GPU_ALLOCATED, POD_GROUP]))] = draw(
            st.text(max_size=30)
        )
    labels: dict[str, Any] = {}
    if draw(st.booleans()):
        labels[draw(st.sampled_from([QUEUE_LABEL, KAI_QUEUE_LABEL]))] = draw(
            st.sampled_from(["default", "team-a", "org", "missing", ""])
        )
    resources: dict[str, Any] = {}
    for field in ("requests", "limits"):
        if draw(st.booleans()):
            resources[field] = {
                k: draw(quantity_value)
                for k in draw(st.sets(st.sampled_from(["cpu", "memory", WHOLE_GPU_RESOURCE, GPU_SLICE_RESOURCE,
                                                       "example.com/x"]), max_size=3))
            }  # fmt: skip
    container: dict[str, Any] = {"name": "main", "image": "x", "resources": resources}
    spec: dict[str, Any] = {
        "schedulerName": draw(st.sampled_from(["tessera", "tessera", "default-scheduler"])),
        "containers": [container] * draw(st.integers(1, 3)),
    }
    status: dict[str, Any] | None = None
    if draw(st.integers(0, 2)) == 0:  # already on a node (another scheduler's pod, or ours after a restart)
        spec["nodeName"] = draw(st.sampled_from(NODE_NAMES))
        status = {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]))}
    if draw(st.integers(0, 4)) == 0:
        spec["priority"] = draw(st.one_of(st.integers(-(2**70), 2**70), json_scalar))
    if draw(st.integers(0, 4)) == 0:
        spec["initContainers"] = [dict(container, name="init")]
    meta: dict[str, Any] = {
        "name": name or draw(st.from_regex(r"[a-z]{1,8}", fullmatch=True)),
        "namespace": namespace,
        "annotations": annotations,
        "labels": labels,
    }
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if status is not None:
        pod["status"] = status
    if draw(st.integers(0, 5)) == 0:  # a field of the wrong shape somewhere
        where = draw(st.sampled_from(["meta.labels", "meta.annotations", "spec.containers", "spec",
                                      "container.resources", "resources.limits", "spec.tolerations",
                                      "spec.nodeSelector", "status"]))  # fmt: skip
        value = draw(json_value)
        holder, key = {
            "meta.labels": (meta, "labels"), "meta.annotations": (meta, "annotations"),
            "spec.containers": (spec, "containers"), "spec": (pod, "spec"),
            "container.resources": (container, "resources"), "resources.limits": (resources, "limits"),
            "spec.tolerations": (spec, "tolerations"), "spec.nodeSelector": (spec, "nodeSelector"),
            "status": (pod, "status"),
        }[where]  # fmt: skip
        holder[key] = value
    return pod


@st.composite
def hostile_node(draw: st.DrawFn, *, name: str | None = None) -> dict[str, Any]:
    labels: dict[str, Any] = {GPU_PRODUCT_LABEL: "A100", GPU_MEMORY_LABEL: "40960"}
    if draw(st.booleans()):
        labels[GPU_MEMORY_LABEL] = draw(number_text)
    capacity: dict[str, Any] = {"cpu": "64", "memory": "512Gi", WHOLE_GPU_RESOURCE: "8"}
    for key in draw(st.sets(st.sampled_from(["cpu", "memory", WHOLE_GPU_RESOURCE]), max_size=3)):
        capacity[key] = draw(quantity_value)
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name or draw(st.from_regex(r"n[0-9]", fullmatch=True)), "labels": labels},
        "status": {"capacity": capacity},
    }
    if draw(st.integers(0, 5)) == 0:
        node[draw(st.sampled_from(["spec", "status"]))] = draw(json_value)
    return node


@st.composite
def hostile_queue(draw: st.DrawFn, *, name: str | None = None) -> dict[str, Any]:
    def resource() -> dict[str, Any]:
        return {k: draw(st.one_of(json_scalar, st.floats())) for k in draw(
            st.sets(st.sampled_from(["quota", "limit", "overQuotaWeight"]), max_size=3))}  # fmt: skip

    spec: dict[str, Any] = {
        "resources": {r: resource() for r in ("gpu", "cpu", "memory") if draw(st.booleans())}
    }
    if draw(st.booleans()):
        spec["priority"] = draw(st.one_of(st.integers(-(2**70), 2**70), json_scalar))
    if draw(st.booleans()):
        spec["parentQueue"] = draw(st.sampled_from(["org", "default", "missing", "x"]))
    return {
        "apiVersion": "scheduling.tessera.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name or draw(st.sampled_from(["team-a", "org", "default", "x"]))},
        "spec": spec,
    }


@st.composite
def hostile_podgroup(draw: st.DrawFn, *, name: str = "g", namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": draw(st.one_of(st.integers(-(2**70), 2**70), json_scalar))}
    if draw(st.booleans()):
        spec["staleGraceSeconds"] = draw(st.one_of(st.floats(), json_scalar))
    if draw(st.booleans()):
        spec["queue"] = draw(st.sampled_from(["team-a", "missing", ""]))
    return {
        "apiVersion": "scheduling.tessera.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
