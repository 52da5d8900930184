"""The chart's rendered manifests (`deploy/manifests/`, by `scripts/render_chart.py`), made to fit the sandbox.

Applied as they are: CRDs (waited on until Established), the Namespace, PriorityClasses, ServiceAccounts,
RBAC, the PodDisruptionBudget, the default Queue and anything the chart adds later. Changed:
- webhook configurations call the local webhook by URL (`https://127.0.0.1:<port>/...`) with the sandbox
  CA's bundle, instead of the Service with a certificate cert-manager would inject;
Left out, because the sandbox runs them as local processes (with the chart's own arguments, see
`components.py`) or because nothing here serves them:
- the scheduler Deployment and the node DaemonSet, their Services, and cert-manager's Issuer/Certificate.

With KAI compatibility (`tessera sandbox up --kai-compat`) the chart is the one rendered with
`kaiCompat.enabled` and `schedulerName: kai-scheduler` (`deploy/manifests/kai-compat/` replaces the
objects those values change), and KAI Scheduler's CRDs and install-time queues are applied first
(`kai_crds.yaml`, `kai_queues.yaml` next to this module: KAI's chart would install them; Tessera's never
does).

An installed package ships the manifests as package data (`scheduler/sandbox/shipped/manifests`, copied
there by setup.py at build time); a source checkout reads `deploy/manifests/` directly.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from scheduler.api.cli import first_line, yaml_problem
from scheduler.sandbox.assets import shipped

Manifest = dict[str, Any]

CRDS_FILE = "crds.yaml"
TESSERA_FILE = "tessera.yaml"
KAI_COMPAT_FILE = "kai-compat/tessera.yaml"
# KAI Scheduler's side, standing in for KAI's own install (package data of this module's package).
KAI_CRDS = Path(__file__).resolve().parent / "kai_crds.yaml"
KAI_QUEUES = Path(__file__).resolve().parent / "kai_queues.yaml"
RUN_AS_PROCESSES = {"Deployment", "DaemonSet", "Service"}
WEBHOOK_KINDS = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
CERT_MANAGER_ANNOTATION = "cert-manager.io/inject-ca-from"


class ManifestError(RuntimeError):
    """The rendered manifests are missing or unreadable; the message says which file."""


def manifest_dir() -> Path:
    folder = shipped("manifests", source="deploy/manifests")
    if not (folder / CRDS_FILE).exists() or not (folder / TESSERA_FILE).exists():
        raise ManifestError(f"the rendered manifests are not in {folder} (run scripts/render_chart.py)")
    return folder


def load(name: str) -> list[Manifest]:
    return load_file(manifest_dir() / name)


def load_file(path: Path) -> list[Manifest]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except (OSError, yaml.YAMLError) as exc:
        why = yaml_problem(exc) if isinstance(exc, yaml.YAMLError) else first_line(exc)
        raise ManifestError(f"{path}: {why}") from None
    if not all(isinstance(d, dict) and d.get("kind") for d in docs):
        raise ManifestError(f"{path} holds a document that is not a Kubernetes object")
    return docs


def crds() -> list[Manifest]:
    return load(CRDS_FILE)


def _identity(doc: Manifest) -> tuple[str, str, str, str]:
    meta = doc.get("metadata") or {}
    return (
        str(doc.get("apiVersion")),
        str(doc["kind"]),
        str(meta.get("namespace", "")),
        str(meta.get("name")),
    )


def chart_objects(*, kai_compat: bool = False) -> list[Manifest]:
    """Every object of the rendered chart, in install order; with `kai_compat`, as rendered with KAI
    compatibility on (the objects of kai-compat/ in place of those they replace)."""
    docs = load(TESSERA_FILE)
    if not kai_compat:
        return docs
    overlay = {_identity(d): d for d in load(KAI_COMPAT_FILE)}
    out = [overlay.pop(_identity(d), d) for d in docs]
    if overlay:
        names = ", ".join(f"{k[1]} {k[3]}" for k in overlay)
        raise ManifestError(f"{KAI_COMPAT_FILE} replaces objects {TESSERA_FILE} does not have: {names}")
    return out


def kai_crds() -> list[Manifest]:
    return load_file(KAI_CRDS)


def kai_queues() -> list[Manifest]:
    return load_file(KAI_QUEUES)


def workload(kind: str, name: str, *, kai_compat: bool = False) -> Manifest:
    """The chart's Deployment or DaemonSet `name` (whose pod spec the sandbox runs as processes)."""
    for doc in chart_objects(kai_compat=kai_compat):
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise ManifestError(f"the rendered chart has no {kind} {name}")


def _runs_here(doc: Manifest) -> bool:
    return doc["kind"] not in RUN_AS_PROCESSES and not str(doc.get("apiVersion", "")).startswith(
        "cert-manager.io/"
    )


def for_sandbox(docs: Iterable[Manifest]) -> tuple[list[Manifest], list[Manifest]]:
    """(objects to apply now, webhook configurations to apply once the webhook answers)."""
    now: list[Manifest] = []
    webhooks: list[Manifest] = []
    for doc in docs:
        if not _runs_here(doc):
            continue
        (webhooks if doc["kind"] in WEBHOOK_KINDS else now).append(doc)
    return now, webhooks


def local_webhooks(docs: Iterable[Manifest], base_url: str, ca_pem: bytes) -> list[Manifest]:
    """Webhook configurations pointing at `base_url` (the webhook's path kept) with the CA bundle."""
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        (doc["metadata"].get("annotations") or {}).pop(CERT_MANAGER_ANNOTATION, None)
        for hook in doc.get("webhooks") or []:
            service = (hook.get("clientConfig") or {}).get("service") or {}
            hook["clientConfig"] = {
                "url": base_url.rstrip("/") + str(service.get("path", "/")),
                "caBundle": bundle,
            }
        out.append(doc)
    return out


def dump(docs: Iterable[Manifest]) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False, explicit_start=True)
