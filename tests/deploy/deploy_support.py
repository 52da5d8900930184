"""Helpers for the deploy tests: the scripts under test, CRD schema validation, chart lookups."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "tessera"
MANIFESTS = ROOT / "deploy" / "manifests"
EXAMPLES = ROOT / "examples" / "install"

# Oldest Kubernetes the chart supports (Chart.yaml kubeVersion; webhook matchConditions are GA there)
# and the newest schemas kubernetes-validate ships.
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())
# Kinds from other projects' CRDs that kubernetes-validate has no schema for.
THIRD_PARTY_KINDS = {"Certificate", "Issuer", "ServiceMonitor"}
TESSERA_GROUP = "scheduling.tessera.dev"

Manifest = dict[str, Any]


def _load_script(name: str) -> ModuleType:
    path = ROOT / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tessera_scripts_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen_crds = _load_script("gen_crds")
render_chart = _load_script("render_chart")


def load_yaml_docs(path: Path) -> list[Manifest]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def prune_nulls(obj: Any) -> Any:
    """What the API server does before validation: drop nulls in fields not marked nullable."""
    if isinstance(obj, dict):
        return {k: prune_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [prune_nulls(v) for v in obj]
    return obj


def _to_jsonschema(node: Any) -> Any:
    """OpenAPI v3.0 (as Kubernetes uses it) -> JSON Schema draft 4 semantics for `jsonschema`."""
    if isinstance(node, dict):
        out = {k: _to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
        if node.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", True)
        if node.get("x-kubernetes-int-or-string"):
            out["type"] = ["integer", "string"]
        elif node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
            out["additionalProperties"] = False  # the API server prunes unknown fields; we flag them
        return out
    if isinstance(node, list):
        return [_to_jsonschema(v) for v in node]
    return node


def crd_by_kind() -> dict[str, Manifest]:
    return {d["spec"]["names"]["kind"]: d for d in render_chart.crds()}


_VALIDATORS: dict[str, jsonschema.Draft4Validator] = {}


def crd_validator(kind: str) -> jsonschema.Draft4Validator:
    if kind not in _VALIDATORS:
        schema = crd_by_kind()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        _VALIDATORS[kind] = jsonschema.Draft4Validator(_to_jsonschema(copy.deepcopy(schema)))
    return _VALIDATORS[kind]


def crd_errors(obj: Manifest) -> list[str]:
    """Schema errors of a Tessera custom resource after the API server's null pruning."""
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in crd_validator(obj["kind"]).iter_errors(prune_nulls(obj))
    ]


def validate_object(obj: Manifest) -> str:
    """Validate one object: Kubernetes kinds with kubernetes-validate (strict, at every supported
    version), Tessera kinds against our CRD schemas. Returns how it was validated."""
    api_version = str(obj.get("apiVersion", ""))
    kind = str(obj.get("kind", ""))
    if api_version.startswith(TESSERA_GROUP + "/"):
        errors = crd_errors(obj)
        assert not errors, f"{kind}/{obj['metadata'].get('name')}: {errors}"
        return "crd"
    if kind in THIRD_PARTY_KINDS:
        assert obj.get("metadata", {}).get("name") and isinstance(obj.get("spec"), dict)
        return "third-party"
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{kind}/{obj.get('metadata', {}).get('name')} invalid for Kubernetes {version}: {exc}"
            )
    return "kubernetes"


def needs_helm() -> None:
    if importlib.util.find_spec("helm_python") is None:
        pytest.skip("rendering the chart needs helm-python-sdk (pip install helm-python-sdk)")


CUSTOM_VALUES: dict[str, dict[str, Any]] = {
    # cert-manager with the chart's own issuer, monitoring on, three replicas, NVIDIA's plugin serves
    # whole GPUs, a different scheduler name.
    "cert-manager": {
        "certManager": {"enabled": True},
        "scheduler": {
            "replicas": 3,
            "placement": "fgd",
            "extraArgs": ["--verbose"],
            "timeBasedFairShare": {"enabled": True, "halfLifePeriod": "12h", "kValue": 2},
        },
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
        "grafana": {"dashboard": {"enabled": True}},
        "devicePlugin": {"wholeGPUResource": ""},
        "schedulerName": "gpu-batch",
        "image": {"repository": "registry.example/tessera", "tag": "1.2.3"},
    },
    # Bring-your-own issuer, single replica without leader election, agent only, no priority classes.
    "minimal": {
        "certManager": {"enabled": True, "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
        "scheduler": {"replicas": 1, "leaderElection": {"enabled": False}},
        "devicePlugin": {"enabled": False},
        "priorityClasses": {"create": False},
        "defaultQueue": {"create": False},
        "metrics": {"podAnnotations": False},
        "nodeDaemonSet": {"nodeSelector": {"gpu": "yes"}, "runtimeClassName": "nvidia"},
    },
    # Plugin only, webhook off.
    "no-webhook": {"webhook": {"enabled": False}, "agent": {"enabled": False}},
}


def find(objects: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
