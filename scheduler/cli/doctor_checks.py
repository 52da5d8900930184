"""What `tessera doctor` checks, as functions of what a `ClusterReader` returns.

Each check says what it found and, when something is wrong, what to run to fix it. Checks read only,
except the webhook probe, which creates an invalid pod with dryRun=All (admission runs, nothing is
stored). The order follows how a pod gets to run: API, CRDs, scheduler, webhook, nodes, queues.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from scheduler.api.keys import (
    GPU_FRACTION,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_SLICE_RESOURCE,
    GROUP,
    QUEUE_LABEL,
    SCHEDULER_NAME,
    WHOLE_GPU_RESOURCE,
)
from scheduler.api.queue import Queue
from scheduler.api.report import GPUNodeReport
from scheduler.cli.cluster_reader import ClusterReader, Obj, ReadError
from scheduler.gpu_memory import memory_from_product
from scheduler.objects import pod_queue
from scheduler.queues.tree import QueueTree

Status = Literal["ok", "warn", "fail"]
CRDS = ("queues", "podgroups", "gpunodereports")
CRD_FIX = "kubectl apply -f deploy/helm/tessera/crds/  (Helm installs CRDs but never upgrades them)"
STALE_REPORT_S = 300.0
MAX_LINES = 5  # per check; the rest are counted


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    message: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"check": self.check, "status": self.status, "message": self.message}
        return out | ({"fix": self.fix} if self.fix else {})


@dataclass(frozen=True)
class DoctorOptions:
    namespace: str = "tessera-system"  # where the chart was installed
    lease_name: str = "tessera-scheduler"
    probe_namespace: str = "default"  # where the webhook probe's dry-run pod is "created"
    now: Callable[[], float] = time.time


def _ts(raw: Any) -> float | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _capped(check: str, status: Status, lines: list[str], fix: str) -> list[Finding]:
    out = [Finding(check, status, line, fix) for line in lines[:MAX_LINES]]
    if len(lines) > MAX_LINES:
        out.append(Finding(check, status, f"... and {len(lines) - MAX_LINES} more like these", fix))
    return out


# ------------------------------------------------------------------------------------------ checks
def check_api(reader: ClusterReader, _opts: DoctorOptions) -> list[Finding]:
    version = reader.server_version()  # ReadError stops the doctor: nothing else can be checked
    return [Finding("api", "ok", f"API server {version} reachable")]


def check_crds(reader: ClusterReader, _opts: DoctorOptions) -> list[Finding]:
    out: list[Finding] = []
    for plural in CRDS:
        name = f"{plural}.{GROUP}"
        crd = reader.get("CustomResourceDefinition", name)
        if crd is None:
            out.append(Finding("crds", "fail", f"CRD {name} is not installed", CRD_FIX))
            continue
        conditions = {c.get("type"): c for c in (crd.get("status") or {}).get("conditions") or []}
        established = conditions.get("Established", {})
        if established.get("status") != "True":
            why = established.get("message") or (conditions.get("NamesAccepted") or {}).get("message") or "?"
            out.append(Finding("crds", "fail", f"CRD {name} is not established: {why}", CRD_FIX))
            continue
        if plural == "queues" and not _queue_crd_takes_quantities(crd):
            out.append(
                Finding(
                    "crds",
                    "fail",
                    "the Queue CRD is older than this Tessera (cpu/memory quantities)",
                    CRD_FIX,
                )
            )
            continue
        out.append(Finding("crds", "ok", f"CRD {name} established"))
    return out


def _queue_crd_takes_quantities(crd: Obj) -> bool:
    try:
        version = crd["spec"]["versions"][0]
        cpu = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["resources"]
        return bool(cpu["properties"]["cpu"]["properties"]["quota"].get("x-kubernetes-int-or-string"))
    except (KeyError, IndexError, TypeError):
        return False


def check_scheduler(reader: ClusterReader, opts: DoctorOptions) -> list[Finding]:
    lease = reader.get("Lease", opts.lease_name, opts.namespace)
    where = f"Lease {opts.namespace}/{opts.lease_name}"
    deploy_fix = (
        f"kubectl -n {opts.namespace} get deploy,pods -l app.kubernetes.io/component=scheduler; "
        f"kubectl -n {opts.namespace} logs deploy/tessera-scheduler  (or pass --namespace where Tessera runs)"
    )
    if lease is None:
        return [
            Finding(
                "scheduler",
                "fail",
                f"no scheduler holds the leader lease: {where} does not exist",
                deploy_fix,
            )
        ]
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    renewed = _ts(spec.get("renewTime"))
    duration = float(spec.get("leaseDurationSeconds") or 15)
    if not holder:
        return [Finding("scheduler", "fail", f"{where} has no holder: no scheduler is leading", deploy_fix)]
    age = opts.now() - renewed if renewed is not None else None
    if age is None or age > max(2 * duration, 60.0):
        ago = "never" if age is None else f"{age:.0f} s ago"
        return [
            Finding(
                "scheduler", "fail", f"the leader {holder} stopped renewing {where} (last {ago})", deploy_fix
            )
        ]
    return [Finding("scheduler", "ok", f"leader {holder} renewed {where} {max(age, 0):.0f} s ago")]


def _tessera_webhooks(reader: ClusterReader) -> list[Obj]:
    hooks = []
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for cfg in reader.list(kind):
            hooks += [h for h in cfg.get("webhooks") or [] if str(h.get("name", "")).endswith(".tessera.dev")]
    return hooks


def _ready_endpoints(reader: ClusterReader, namespace: str, service: str) -> int:
    ready = 0
    for eps in reader.list("EndpointSlice", namespace, labels=f"kubernetes.io/service-name={service}"):
        for ep in eps.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready", True):
                ready += 1
    return ready


def probe_pod(namespace: str) -> Obj:
    """A pod every Tessera webhook must refuse (gpu-fraction 1.5), for a dry-run create."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "tessera-doctor-probe",
            "namespace": namespace,
            "annotations": {GPU_FRACTION: "1.5"},
        },
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "restartPolicy": "Never",
            "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def check_webhook(reader: ClusterReader, opts: DoctorOptions) -> list[Finding]:
    hooks = _tessera_webhooks(reader)
    if not hooks:
        return [
            Finding(
                "webhook",
                "warn",
                "no Tessera admission webhook is configured: bad GPU requests are caught only by the scheduler, "
                "after the pod was created",
                "helm upgrade ... --set webhook.enabled=true",
            )
        ]
    out: list[Finding] = []
    services = {
        (svc.get("namespace"), svc.get("name"))
        for h in hooks
        if (svc := (h.get("clientConfig") or {}).get("service"))
    }
    for ns, name in sorted(services, key=str):
        if reader.get("Service", str(name), str(ns)) is None:
            out.append(
                Finding(
                    "webhook",
                    "fail",
                    f"the webhook's Service {ns}/{name} does not exist",
                    "helm upgrade --install ...",
                )
            )
        elif _ready_endpoints(reader, str(ns), str(name)) == 0:
            out.append(
                Finding(
                    "webhook",
                    "fail",
                    f"the webhook's Service {ns}/{name} has no ready endpoint: the scheduler pods are not ready",
                    f"kubectl -n {ns} get pods -l app.kubernetes.io/component=scheduler; kubectl -n {ns} describe pods",
                )
            )
    try:
        refusal = reader.dry_run_create(probe_pod(opts.probe_namespace))
    except ReadError as exc:
        return [
            *out,
            Finding("webhook", "warn", f"could not probe the webhook: {exc}", "pass --probe-namespace NS"),
        ]
    if refusal is None:
        out.append(
            Finding(
                "webhook",
                "fail",
                f'a pod with {GPU_FRACTION}: "1.5" was admitted in namespace {opts.probe_namespace}: the webhook did '
                "not run",
                "check the webhook configurations' namespaceSelector and matchConditions (kubectl get "
                "validatingwebhookconfigurations -o yaml)",
            )
        )
    elif "failed calling webhook" in refusal or ("webhook" in refusal and GPU_FRACTION not in refusal):
        out.append(
            Finding(
                "webhook",
                "fail",
                f"the API server cannot call the webhook: {refusal}",
                "check the scheduler pods, the Service and the certificate (caBundle) of the webhook configurations",
            )
        )
    elif GPU_FRACTION in refusal:
        out.append(
            Finding("webhook", "ok", f"the webhook refused an invalid pod: {refusal.split(': ', 1)[-1]}")
        )
    else:
        out.append(
            Finding("webhook", "warn", f"could not probe the webhook: {refusal}", "pass --probe-namespace NS")
        )
    return out


def gpu_nodes(nodes: list[Obj]) -> list[Obj]:
    """Nodes that are meant to run GPU pods: labelled for the node DaemonSet, or with GPUs advertised."""

    def is_gpu(node: Obj) -> bool:
        labels = (node.get("metadata") or {}).get("labels") or {}
        capacity = (node.get("status") or {}).get("capacity") or {}
        return labels.get("nvidia.com/gpu.present") == "true" or any(
            str(capacity.get(r, "0")) not in ("0", "") for r in (WHOLE_GPU_RESOURCE, GPU_SLICE_RESOURCE)
        )

    return [n for n in nodes if is_gpu(n)]


def check_nodes(reader: ClusterReader, opts: DoctorOptions) -> list[Finding]:
    nodes = gpu_nodes(reader.list("Node"))
    if not nodes:
        return [
            Finding(
                "nodes",
                "fail",
                "no GPU node: none is labelled nvidia.com/gpu.present=true or advertises GPUs",
                "kubectl label node NODE nvidia.com/gpu.present=true  (GPU feature discovery does it)",
            )
        ]
    reports: dict[str, GPUNodeReport] = {}
    bad_reports: list[str] = []
    for obj in reader.list("GPUNodeReport"):
        try:
            r = GPUNodeReport.model_validate(obj)
            reports[r.metadata.name] = r
        except ValidationError as exc:
            bad_reports.append(
                f"GPUNodeReport {(obj.get('metadata') or {}).get('name')}: {exc.errors()[0]['msg']}"
            )
    no_plugin, no_agent, stale, memory, unhealthy = [], [], [], [], []
    now = opts.now()
    for node in nodes:
        meta, status = node.get("metadata") or {}, node.get("status") or {}
        name = str(meta.get("name"))
        if str((status.get("allocatable") or status.get("capacity") or {}).get(GPU_SLICE_RESOURCE, "0")) in (
            "0",
            "",
        ):
            no_plugin.append(
                f"node {name} advertises no {GPU_SLICE_RESOURCE}: the device plugin is not registered"
            )
        report = reports.get(name)
        if report is None:
            no_agent.append(
                f"node {name} has no GPUNodeReport: the node agent is not running or cannot write it"
            )
        else:
            observed = _ts(report.spec.observed_at)
            if observed is None or now - observed > STALE_REPORT_S:
                ago = "at an unreadable time" if observed is None else f"{now - observed:.0f} s ago"
                stale.append(f"node {name}'s GPUNodeReport was last written {ago}")
            sick = [g.index for g in report.spec.gpus if g.health == "Unhealthy"]
            if sick:
                unhealthy.append(
                    f"node {name}: GPU {', '.join(map(str, sick))} unhealthy (tessera nodes {name})"
                )
        labels = meta.get("labels") or {}
        if not labels.get(GPU_MEMORY_LABEL):
            guess = memory_from_product(labels.get(GPU_PRODUCT_LABEL, ""))
            memory.append(
                f"node {name} has no {GPU_MEMORY_LABEL} label; "
                + (
                    f"the scheduler assumes {guess} MiB per GPU from its product"
                    if guess
                    else "the scheduler ignores it"
                )
            )
    pods = f"kubectl -n {opts.namespace} get pods -l app.kubernetes.io/component=node -o wide"
    out = _capped(
        "nodes", "fail", no_plugin, f"{pods}; kubectl -n {opts.namespace} logs POD -c tessera-device-plugin"
    )
    out += _capped(
        "nodes", "fail", no_agent + stale, f"{pods}; kubectl -n {opts.namespace} logs POD -c tessera-agent"
    )
    out += _capped("nodes", "fail", bad_reports, f"kubectl -n {opts.namespace} logs POD -c tessera-agent")
    out += _capped("nodes", "warn", memory, f"kubectl label node NODE {GPU_MEMORY_LABEL}=<MiB per GPU>")
    out += _capped("nodes", "warn", unhealthy, "kubectl describe node NODE; check the driver (nvidia-smi)")
    if not any(f.status == "fail" for f in out):
        out.insert(
            0, Finding("nodes", "ok", f"{len(nodes)} GPU node(s) with the device plugin and a fresh report")
        )
    return out


def check_queues(reader: ClusterReader, _opts: DoctorOptions) -> list[Finding]:
    objects = reader.list("Queue")
    queues: list[Queue] = []
    invalid: list[str] = []
    for obj in objects:
        try:
            queues.append(Queue.model_validate(obj))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            invalid.append(
                f"queue {(obj.get('metadata') or {}).get('name')} is ignored: {where}: {err['msg']}"
            )
    tree = QueueTree(queues)
    fix = "kubectl edit queue NAME  (units and fields: docs/queues.md)"
    out = _capped("queues", "fail", invalid, fix)
    out += _capped("queues", "warn", list(tree.problems.values()), fix)
    if not any(q.name == "default" for q in queues):
        out.append(
            Finding(
                "queues",
                "warn",
                "no Queue named default: pods without a tessera.dev/queue label go to an implicit unlimited one",
                "helm upgrade ... --set defaultQueue.create=true, or create it (docs/queues.md)",
            )
        )
    wrong: list[str] = []
    for pod in reader.list("Pod", fields=f"spec.schedulerName={SCHEDULER_NAME},status.phase=Pending"):
        meta = pod.get("metadata") or {}
        problem = tree.leaf_error(pod_queue(meta.get("labels") or {}))
        if problem:
            wrong.append(f"pod {meta.get('namespace')}/{meta.get('name')}: {problem}")
    out += _capped("queues", "fail", wrong, f"kubectl label pod POD {QUEUE_LABEL}=<leaf queue> --overwrite")
    if not any(f.status != "ok" for f in out):
        out.insert(0, Finding("queues", "ok", f"{len(queues)} queue(s), all valid"))
    return out


CHECKS: tuple[Callable[[ClusterReader, DoctorOptions], list[Finding]], ...] = (
    check_api,
    check_crds,
    check_scheduler,
    check_webhook,
    check_nodes,
    check_queues,
)


def diagnose(reader: ClusterReader, opts: DoctorOptions) -> list[Finding]:
    """Run every check; an unreachable API ends the run, another check's read error is its finding."""
    try:
        findings = check_api(reader, opts)
    except ReadError as exc:
        return [Finding("api", "fail", str(exc), "check the kubeconfig (kubectl cluster-info)")]
    for check in CHECKS[1:]:
        name = check.__name__.removeprefix("check_")
        try:
            findings += check(reader, opts)
        except ReadError as exc:
            findings.append(
                Finding(
                    name, "fail", f"could not check: {exc}", "check your RBAC (kubectl auth can-i list ...)"
                )
            )
    return findings
