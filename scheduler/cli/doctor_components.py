"""`tessera doctor`'s checks of the parts that run on the cluster: the admission webhook (its Service,
its endpoints, and a dry-run probe through the API server) and, per GPU node, the device plugin's
capacity, the agent's report and the GPU memory the scheduler knows.

A fix that points at the chart's pods names them only when they exist: where the parts run outside the
cluster (`tessera sandbox` runs them as local processes) it says where their logs are instead."""

from __future__ import annotations

import re

from pydantic import ValidationError

from scheduler.api.keys import (
    GPU_FRACTION,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_SLICE_RESOURCE,
    SCHEDULER_NAME,
    WHOLE_GPU_RESOURCE,
)
from scheduler.api.report import GPUNodeReport
from scheduler.cli.cluster_reader import ClusterReader, Obj, ReadError
from scheduler.cli.doctor_findings import STALE_REPORT_S, DoctorOptions, Finding, capped, timestamp
from scheduler.model.gpu_memory import memory_from_product


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


_MATCHED_NAME = re.compile(r"object\.spec\.schedulerName\s*==\s*'([^']+)'")


def scheduler_name(reader: ClusterReader, opts: DoctorOptions) -> str:
    """The scheduler name pods must give: the option, else the one the webhooks match on, else `tessera`."""
    if opts.scheduler_name:
        return opts.scheduler_name
    for hook in _tessera_webhooks(reader):
        for condition in hook.get("matchConditions") or []:
            found = _MATCHED_NAME.search(str(condition.get("expression", "")))
            if found:
                return found.group(1)
    return SCHEDULER_NAME


def component_pods(reader: ClusterReader, opts: DoctorOptions, component: str) -> bool:
    """Whether the chart's pods of `component` (scheduler, node) exist in the release namespace."""
    try:
        return bool(reader.list("Pod", opts.namespace, labels=f"app.kubernetes.io/component={component}"))
    except ReadError:
        return True  # cannot tell: name them, as the chart makes them


def outside_hint(opts: DoctorOptions, component: str) -> str:
    return (
        f"no {component} pod runs in namespace {opts.namespace}: where Tessera's parts run outside the "
        "cluster (`tessera sandbox`), `tessera sandbox status` lists each one's log; else pass --namespace "
        "where the chart is installed"
    )


def probe_pod(namespace: str, scheduler: str = SCHEDULER_NAME) -> Obj:
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
            "schedulerName": scheduler,
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
        refusal = reader.dry_run_create(probe_pod(opts.probe_namespace, scheduler_name(reader, opts)))
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
            observed = timestamp(report.spec.observed_at)
            if observed is None or now - observed > STALE_REPORT_S:
                ago = "at an unreadable time" if observed is None else f"{now - observed:.0f} s ago"
                stale.append(f"node {name}'s GPUNodeReport was last written {ago}")
            sick = [g.index for g in report.spec.gpus if g.health == "Unhealthy"]
            if sick:
                unhealthy.append(
                    f"node {name}: GPU {', '.join(map(str, sick))} unhealthy (tessera nodes {name})"
                )
        labels = meta.get("labels") or {}
        # The scheduler takes each GPU's memory from the node's report; the label (or the product name)
        # serves only until the first report, so a node with a report needs neither.
        measured = report is not None and any(g.memory_total_mib > 0 for g in report.spec.gpus)
        if not labels.get(GPU_MEMORY_LABEL) and not measured:
            guess = memory_from_product(labels.get(GPU_PRODUCT_LABEL, ""))
            memory.append(
                f"node {name} has no {GPU_MEMORY_LABEL} label and no GPUNodeReport telling its GPUs' memory; "
                + (
                    f"the scheduler assumes {guess} MiB per GPU from its product until the report comes"
                    if guess
                    else "its GPUs take no GPU pod until the node agent reports"
                )
            )
    if component_pods(reader, opts, "node"):
        pods = f"kubectl -n {opts.namespace} get pods -l app.kubernetes.io/component=node -o wide"
        plugin_fix = f"{pods}; kubectl -n {opts.namespace} logs POD -c tessera-device-plugin"
        agent_fix = f"{pods}; kubectl -n {opts.namespace} logs POD -c tessera-agent"
        report_fix = f"kubectl -n {opts.namespace} logs POD -c tessera-agent"
    else:
        plugin_fix = agent_fix = report_fix = outside_hint(opts, "node")
    out = capped("nodes", "fail", no_plugin, plugin_fix)
    out += capped("nodes", "fail", no_agent + stale, agent_fix)
    out += capped("nodes", "fail", bad_reports, report_fix)
    out += capped(
        "nodes",
        "warn",
        memory,
        f"start the node agent there (it publishes the report), or kubectl label node NODE {GPU_MEMORY_LABEL}=<MiB per GPU>",
    )
    out += capped("nodes", "warn", unhealthy, "kubectl describe node NODE; check the driver (nvidia-smi)")
    if not any(f.status == "fail" for f in out):
        out.insert(
            0, Finding("nodes", "ok", f"{len(nodes)} GPU node(s) with the device plugin and a fresh report")
        )
    return out
