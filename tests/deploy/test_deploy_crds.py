"""The CRDs: generated from the pydantic models, structural, and agreeing with the models on samples."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.api import GPUNodeReport, PodGroup, Queue
from scheduler.api.report import GPUReport, summarize_gpus
from scheduler.api.topology import Topology
from tests.deploy.deploy_support import (
    CHART,
    crd_by_kind,
    crd_errors,
    gen_crds,
    validate_object,
)

MODELS: dict[str, Any] = {
    "Queue": Queue, "PodGroup": PodGroup, "GPUNodeReport": GPUNodeReport, "Topology": Topology,
}  # fmt: skip


def queue_sample() -> dict[str, Any]:
    return Queue.model_validate(
        {
            "metadata": {"name": "team-a"},
            "spec": {
                "parentQueue": "research",
                "priority": 120,
                "displayName": "Team A",
                "namespaces": ["team-a", "team-a-dev"],
                "resources": {
                    "gpu": {"quota": 4, "overQuotaWeight": 2, "limit": 8},
                    "cpu": {"quota": "500m", "limit": 64},
                    "memory": {"quota": "65536.5Mi", "overQuotaWeight": 0, "limit": "128Gi"},
                },
            },
            "status": {
                "allocated": {"gpu": 2.5, "cpu": 10},
                "requested": {"gpu": 6},
                "fairShare": {"gpu": 4.75, "memory": 1024},
            },
        }
    ).model_dump(by_alias=True, mode="json")


def podgroup_sample() -> dict[str, Any]:
    return PodGroup.model_validate(
        {
            "metadata": {"name": "ddp", "namespace": "ml"},
            "spec": {
                "minMember": 4,
                "queue": "team-a",
                "priorityClassName": "train",
                "preemptibility": "non-preemptible",
                "staleGraceSeconds": 30,
                "topologyConstraint": {
                    "topology": "dc",
                    "requiredTopologyLevel": "topology.kubernetes.io/zone",
                    "preferredTopologyLevel": "rack",
                },
            },
            "status": {
                "phase": "Unschedulable",
                "running": 1,
                "conditions": [
                    {
                        "type": "Schedulable",
                        "status": "False",
                        "reason": "NotEnoughGPUs",
                        "message": "4 pods need 4 GPUs; 3 free in queue team-a",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            },
        }
    ).model_dump(by_alias=True, mode="json")


def report_sample() -> dict[str, Any]:
    return GPUNodeReport.model_validate(
        {
            "metadata": {"name": "gpu-node-1"},
            "spec": {
                "node": "gpu-node-1",
                "driverVersion": "550.54.15",
                "cudaVersion": "12.4",
                "observedAt": "2026-01-01T00:00:00Z",
                "gpus": [
                    {
                        "index": 0,
                        "uuid": "GPU-0",
                        "model": "NVIDIA H100 80GB HBM3",
                        "memoryTotalMiB": 81559,
                        "memoryUsedMiB": 40000,
                        "utilizationPct": 87.5,
                        "temperatureC": 61,
                        "powerW": 412.3,
                        "processes": [
                            {
                                "pid": 4242,
                                "usedMiB": 40000,
                                "pod": "half-gpu",
                                "namespace": "ml",
                                "container": "cuda",
                                "podUID": "uid-1",
                            },
                        ],
                        "assignedMilli": 500,
                        "shares": [
                            {
                                "pod": "half-gpu",
                                "namespace": "ml",
                                "milli": 500,
                                "memoryLimitMiB": 40779,
                                "memoryUsedMiB": 40000,
                                "overLimit": False,
                            },
                        ],
                    },
                    {
                        "index": 1,
                        "uuid": "GPU-1",
                        "model": "NVIDIA H100 80GB HBM3",
                        "memoryTotalMiB": 81559,
                        "health": "Unhealthy",
                        "healthReason": "Xid 79: GPU has fallen off the bus",
                    },
                ],
            },
        }
    ).model_dump(by_alias=True, mode="json")


def topology_sample() -> dict[str, Any]:
    return Topology.model_validate(
        {
            "metadata": {"name": "dc"},
            "spec": {
                "levels": [
                    {"nodeLabel": "topology.kubernetes.io/zone", "alias": "zone"},
                    {"nodeLabel": "example.com/block"},
                    {"nodeLabel": "example.com/rack", "alias": "rack"},
                    {"nodeLabel": "nvidia.com/gpu.clique", "alias": "nvlink"},
                ]
            },
        }
    ).model_dump(by_alias=True, mode="json", exclude_none=True)


SAMPLES = {
    "Queue": queue_sample, "PodGroup": podgroup_sample, "GPUNodeReport": report_sample,
    "Topology": topology_sample,
}  # fmt: skip


def test_crd_files_are_generated_from_the_models() -> None:
    wanted = gen_crds.render_all()
    on_disk = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    assert on_disk == wanted, "CRDs are stale: run python scripts/gen_crds.py"
    assert gen_crds.main(["--check"]) == 0


def test_check_mode_reports_a_stale_crd(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert gen_crds.main(["--out", str(tmp_path)]) == 0
    target = next(tmp_path.glob("queues.*.yaml"))
    target.write_text(target.read_text().replace("minimum: 0", "minimum: 1", 1))
    assert gen_crds.main(["--check", "--out", str(tmp_path)]) == 1
    assert "stale" in capsys.readouterr().out


def test_crds_are_valid_kubernetes_objects() -> None:
    crds = crd_by_kind()
    assert set(crds) == {"Queue", "PodGroup", "GPUNodeReport", "Topology"}
    for crd in crds.values():
        assert validate_object(crd) == "kubernetes"
    assert crds["Queue"]["spec"]["scope"] == "Cluster"
    assert crds["GPUNodeReport"]["spec"]["scope"] == "Cluster"
    assert crds["PodGroup"]["spec"]["scope"] == "Namespaced"
    assert crds["Topology"]["spec"]["scope"] == "Cluster"
    assert "subresources" in crds["Queue"]["spec"]["versions"][0]
    assert "subresources" in crds["PodGroup"]["spec"]["versions"][0]


# What a structural schema may carry inside anyOf/allOf/oneOf/not: value checks only.
_VALUE_ONLY = {
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "anyOf",
    "allOf",
    "oneOf",
    "not",
}


def _structural_problems(node: dict[str, Any], where: str) -> list[str]:
    problems = []
    if "$ref" in node or "definitions" in node:
        problems.append(f"{where}: references are not allowed")
    typeless_ok = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string")
    if "type" not in node and not typeless_ok:
        problems.append(f"{where}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{where}: properties and additionalProperties together")
    for key in ("exclusiveMinimum", "exclusiveMaximum", "nullable"):
        if key in node and not isinstance(node[key], bool):
            problems.append(f"{where}: {key} must be a boolean in OpenAPI v3.0")
    for key in ("title", "readOnly", "const", "$defs"):
        if key in node:
            problems.append(f"{where}: {key} is not a Kubernetes schema field")
    for key in ("anyOf", "allOf", "oneOf"):
        for branch in node.get(key, []):
            extra = set(branch) - _VALUE_ONLY
            if extra:
                problems.append(f"{where}.{key}: only value validation allowed, found {sorted(extra)}")
    for name, sub in node.get("properties", {}).items():
        problems += _structural_problems(sub, f"{where}.{name}")
    if isinstance(node.get("items"), dict):
        problems += _structural_problems(node["items"], f"{where}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _structural_problems(node["additionalProperties"], f"{where}{{}}")
    return problems


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_schemas_are_structural(kind: str) -> None:
    schema = crd_by_kind()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _structural_problems(schema, kind) == []
    assert schema["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_model_samples_validate_against_the_crd(kind: str) -> None:
    sample = SAMPLES[kind]()
    assert crd_errors(sample) == []
    # Defaults in the schema are the model's defaults: a minimal object is valid in both.
    minimal = MODELS[kind].model_validate({"metadata": {"name": "x"}, **_minimal_spec(kind)})
    assert crd_errors(minimal.model_dump(by_alias=True, mode="json")) == []


def _minimal_spec(kind: str) -> dict[str, Any]:
    if kind == "GPUNodeReport":
        return {"spec": {"node": "x", "observedAt": "2026-01-01T00:00:00Z"}}
    if kind == "Topology":
        return {"spec": {"levels": [{"nodeLabel": "rack"}]}}
    return {}


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    node: Any = out
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return out


_DELETE = object()

# (kind, path, bad value): the model and the CRD must both reject each.
INVALID = [
    ("Queue", "spec.resources.gpu.quota", -2),
    ("Queue", "spec.resources.gpu.limit", -0.5),
    ("Queue", "spec.resources.cpu.overQuotaWeight", -1),
    ("Queue", "spec.resources.cpu.quota", -2),
    ("Queue", "spec.resources.cpu.quota", 0.5),  # a fraction of a core is a string, as in any CRD
    ("Queue", "spec.resources.cpu.limit", "lots"),
    ("Queue", "spec.resources.memory.quota", "-5Gi"),
    ("Queue", "spec.resources.memory.limit", True),
    ("Queue", "spec.priority", "high"),
    ("Queue", "status.fairShare.gpu", "lots"),
    ("PodGroup", "spec.minMember", 0),
    ("PodGroup", "spec.preemptibility", "sometimes"),
    ("PodGroup", "spec.staleGraceSeconds", -1),
    ("PodGroup", "status.phase", "Sleeping"),
    ("PodGroup", "status.conditions.0.type", _DELETE),
    ("GPUNodeReport", "spec.node", _DELETE),
    ("GPUNodeReport", "spec.observedAt", _DELETE),
    ("GPUNodeReport", "spec.gpus.0.health", "Broken"),
    ("GPUNodeReport", "spec.gpus.0.memoryTotalMiB", "80GB"),
    ("GPUNodeReport", "spec.gpus.0.processes.0.pid", _DELETE),
    ("GPUNodeReport", "spec.gpus.0.shares.0.milli", 0.5),
    ("PodGroup", "spec.topologyConstraint.topology", ""),
    ("PodGroup", "spec.topologyConstraint.requiredTopologyLevel", "r" * 317),
    ("Topology", "spec.levels", []),
    ("Topology", "spec.levels.0.nodeLabel", "not a label key!"),
    ("Topology", "spec.levels.1.nodeLabel", _DELETE),
    ("Topology", "spec", _DELETE),
]


@pytest.mark.parametrize(("kind", "path", "value"), INVALID, ids=[f"{k}:{p}" for k, p, _ in INVALID])
def test_model_and_crd_reject_the_same_bad_values(kind: str, path: str, value: Any) -> None:
    bad = _set(SAMPLES[kind](), path, value)
    with pytest.raises(ValidationError):
        MODELS[kind].model_validate(bad)
    assert crd_errors(bad), f"the CRD accepts {path}={value!r}, the model does not"


def test_limit_below_quota_has_a_server_side_rule() -> None:
    """The model's cross-field check (limit >= quota) cannot be a plain schema check: it is a CEL rule."""
    with pytest.raises(ValidationError):
        Queue.model_validate(_set(queue_sample(), "spec.resources.gpu.limit", 2))
    schema = crd_by_kind()["Queue"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    gpu = schema["properties"]["spec"]["properties"]["resources"]["properties"]["gpu"]
    rules = [r["rule"] for r in gpu["x-kubernetes-validations"]]
    assert any("self.limit >= self.quota" in r for r in rules)


def _resolve(obj: Any, json_path: str) -> Any:
    node = obj
    for part in json_path.strip(".").replace("]", "").split("."):
        name, _, index = part.partition("[")
        node = node.get(name) if isinstance(node, dict) else None
        if index == "*" and isinstance(node, list):  # every item (kubectl joins them with commas)
            rest = json_path.split("[*]", 1)[1]
            found = [_resolve(item, rest) for item in node]
            return [f for f in found if f is not None] or None
        if index and isinstance(node, list):
            node = node[int(index)] if len(node) > int(index) else None
        if node is None:
            return None
    return node


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_printer_columns_point_at_fields_of_a_full_object(kind: str) -> None:
    sample = SAMPLES[kind]()
    sample["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    columns = crd_by_kind()[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
    for col in columns:
        assert _resolve(sample, col["jsonPath"]) is not None, f"{kind} column {col['name']} shows nothing"


def test_printer_columns_cover_the_documented_views() -> None:
    names = {
        kind: {c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
        for kind, crd in crd_by_kind().items()
    }
    assert {"Parent", "Priority", "GPU Quota", "GPU Limit", "GPU Allocated", "GPU Fair Share"} <= names[
        "Queue"
    ]
    assert {"GPUs", "Mem Used MiB", "Util %", "Health"} <= names["GPUNodeReport"]
    assert {"MinMember", "Queue", "Phase"} <= names["PodGroup"]


def test_report_summary_rolls_up_the_gpus() -> None:
    report = GPUNodeReport.model_validate(report_sample())
    summary = report.model_dump(by_alias=True)["spec"]["summary"]
    assert summary == {
        "gpus": 2,
        "healthyGPUs": 1,
        "health": "Unhealthy",
        "memoryUsedMiB": 40000,
        "memoryTotalMiB": 2 * 81559,
        "utilizationPct": 87.5,
        "assignedMilli": 500,
    }
    # A summary sent in is recomputed, never trusted.
    tampered = report_sample()
    tampered["spec"]["summary"]["gpus"] = 99
    assert GPUNodeReport.model_validate(tampered).spec.summary.gpus == 2


def test_summary_health_rules() -> None:
    def gpu(health: str, util: float | None) -> GPUReport:
        return GPUReport.model_validate(
            {
                "index": 0,
                "uuid": "u",
                "model": "m",
                "memoryTotalMiB": 10,
                "health": health,
                "utilizationPct": util,
            }
        )

    assert summarize_gpus([]).health == "Unknown"
    assert summarize_gpus([]).utilization_pct is None
    assert summarize_gpus([gpu("Healthy", 10), gpu("Healthy", None)]).health == "Healthy"
    assert summarize_gpus([gpu("Healthy", 10), gpu("Healthy", None)]).utilization_pct == 10
    assert summarize_gpus([gpu("Healthy", 10), gpu("Unknown", 30)]).health == "Unknown"
    assert summarize_gpus([gpu("Unknown", 10), gpu("Unhealthy", 30)]).health == "Unhealthy"


def test_generator_refuses_schemas_it_cannot_translate() -> None:
    with pytest.raises(ValueError, match="type unions"):
        gen_crds.to_structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})
    with pytest.raises(ValueError, match="cannot translate"):
        gen_crds.to_structural({"type": "string", "patternProperties": {}}, {})
    with pytest.raises(ValueError, match="needs a type"):
        gen_crds.to_structural({"description": "anything"}, {})
