"""What `tessera doctor` checks, as functions of what a `ClusterReader` returns.

Each check says what it found and, when something is wrong, what to run to fix it. Checks read only,
except the webhook probe, which creates an invalid pod with dryRun=All (admission runs, nothing is
stored). The order follows how a pod gets to run: API, CRDs, scheduler, webhook, nodes, queues
(webhook and nodes: doctor_components.py).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError

from scheduler.api.keys import GROUP, QUEUE_LABEL
from scheduler.api.queue import Queue
from scheduler.cli.cluster_reader import ClusterReader, Obj, ReadError
from scheduler.cli.doctor_components import (
    check_nodes,
    check_webhook,
    component_pods,
    outside_hint,
    scheduler_name,
)
from scheduler.cli.doctor_findings import DoctorOptions, Finding, capped, timestamp
from scheduler.model.parse import pod_queue
from scheduler.queues.tree import QueueTree

CRDS = ("queues", "podgroups", "gpunodereports", "topologies")
CRD_FIX = "kubectl apply -f deploy/helm/tessera/crds/  (Helm installs CRDs but never upgrades them)"
__all__ = ["CHECKS", "DoctorOptions", "Finding", "check_nodes", "check_webhook", "diagnose"]


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
        (
            f"kubectl -n {opts.namespace} get deploy,pods -l app.kubernetes.io/component=scheduler; "
            f"kubectl -n {opts.namespace} logs deploy/tessera-scheduler  (or pass --namespace where Tessera runs)"
        )
        if component_pods(reader, opts, "scheduler")
        else outside_hint(opts, "scheduler")
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
    renewed = timestamp(spec.get("renewTime"))
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


def check_queues(reader: ClusterReader, opts: DoctorOptions) -> list[Finding]:
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
    out = capped("queues", "fail", invalid, fix)
    out += capped("queues", "warn", list(tree.problems.values()), fix)
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
    name = scheduler_name(reader, opts)
    for pod in reader.list("Pod", fields=f"spec.schedulerName={name},status.phase=Pending"):
        meta = pod.get("metadata") or {}
        problem = tree.leaf_error(pod_queue(meta.get("labels") or {}))
        if problem:
            wrong.append(f"pod {meta.get('namespace')}/{meta.get('name')}: {problem}")
    out += capped("queues", "fail", wrong, f"kubectl label pod POD {QUEUE_LABEL}=<leaf queue> --overwrite")
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
