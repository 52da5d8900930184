"""`tessera-scheduler`: the scheduler as a Kubernetes component (a leader-elected Deployment).

Flags follow the Helm chart (deploy/helm/tessera/templates/scheduler-deployment.yaml).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import socket
import threading
import uuid
from pathlib import Path

import typer
from kubernetes import client, config

from scheduler.api import cli as house
from scheduler.api.cli import CommandError, HouseCommand, VersionOption, check_choice, first_line, new_app
from scheduler.api.duration import parse_duration
from scheduler.api.keys import SCHEDULER_NAME, WHOLE_GPU_RESOURCE
from scheduler.cycle import SchedulerConfig
from scheduler.framework.budget import BudgetLimits
from scheduler.framework.eviction import BUDGET_POLICIES, EvictionPolicy
from scheduler.framework.metrics import SchedulerMetrics
from scheduler.kube.http_server import SchedulerHTTPServer
from scheduler.kube.kai_compat import access_problem
from scheduler.kube.queue_index import informer_namespace_check, informer_queue_lookup
from scheduler.kube.runner import RunnerConfig, SchedulerRunner
from scheduler.placement.registry import DEFAULT_POLICY, policy_names
from scheduler.queues.usage_history import UsageParams
from scheduler.webhook.admission import AdmissionConfig
from scheduler.webhook.server import WebhookServer

log = logging.getLogger("tessera.scheduler")

SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")

app = new_app()
LOG_LEVELS = ("debug", "info", "warning", "error")


class NoCredentials(CommandError):
    """Neither in-cluster credentials nor a usable kubeconfig."""


def api_client(kubeconfig: str | None, *, connections: int = 32) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig. `connections`: kept open per host
    (watches, binder threads, status writers), so no thread opens a fresh TLS connection per request."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = connections
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise NoCredentials(
            f"no Kubernetes credentials: {first_line(exc)} (run in a pod, or pass --kubeconfig FILE)"
        ) from None
    return client.ApiClient(configuration)


def own_service_account(token_file: Path = SA_TOKEN) -> str | None:
    """`system:serviceaccount:<ns>:<name>` from the pod's token (its `sub` claim; not verified, only read)."""
    try:
        payload = token_file.read_text().strip().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (OSError, IndexError, ValueError):
        return None
    sub = claims.get("sub") if isinstance(claims, dict) else None
    return sub if isinstance(sub, str) and sub.startswith("system:serviceaccount:") else None


def host_port(raw: str, what: str) -> tuple[str, int]:
    host, sep, port = raw.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise typer.BadParameter(f"must be HOST:PORT, got {raw!r}", param_hint=what)
    return host or "0.0.0.0", int(port)


def seconds(raw: str, what: str, *, positive: bool = True) -> float:
    try:
        value = parse_duration(raw)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=what) from None
    if positive and value <= 0:
        raise typer.BadParameter(f"must be longer than 0, got {raw!r}", param_hint=what)
    return value


def usage_params(window: str, half_life: str, k_value: float, resolution: str) -> UsageParams | None:
    """Time-based fair share's flags, checked; None when it is off (no --usage-window)."""
    if not window:
        if half_life or resolution:
            raise typer.BadParameter("needs --usage-window (time-based fair share is off without it)",
                                     param_hint="--usage-half-life" if half_life else "--usage-resolution")  # fmt: skip
        return None
    try:
        return UsageParams(
            window_s=seconds(window, "--usage-window"),
            half_life_s=seconds(half_life, "--usage-half-life") if half_life else None,
            k_value=k_value,
            resolution_s=seconds(resolution, "--usage-resolution") if resolution else None,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--usage-k-value") from None


@app.command(cls=HouseCommand)
def run(
    kubeconfig: str = typer.Option(
        None, metavar="FILE", help="Kubeconfig file (default: in-cluster, else ~/.kube/config)."
    ),
    scheduler_name: str = typer.Option(
        SCHEDULER_NAME, metavar="NAME", help="spec.schedulerName of the pods to schedule."
    ),
    listen: str = typer.Option(
        "0.0.0.0:8080", metavar="HOST:PORT", help="Where /metrics, /healthz and /ui listen ('' = off)."
    ),
    cycle_period: str = typer.Option(
        "1s", metavar="TIME", help="Time between scheduling cycles (1s, 500ms)."
    ),
    log_level: str = typer.Option("info", metavar="LEVEL", help="debug, info, warning or error."),
    placement: str = typer.Option(
        "", metavar="NAME", help=f"Placement policy ('' = default): {', '.join(policy_names())}."
    ),
    leader_elect: bool = typer.Option(False, help="Elect a leader on a Lease (run 2+ replicas for HA)."),
    leader_elect_namespace: str = typer.Option(
        "tessera-system", metavar="NAMESPACE", help="Namespace of the leader Lease."
    ),
    leader_elect_lease_name: str = typer.Option(
        "tessera-scheduler", metavar="NAME", help="Name of the leader Lease."
    ),
    leader_elect_identity: str = typer.Option(
        None, metavar="ID", help="This replica's identity (default: hostname)."
    ),
    webhook_listen: str = typer.Option(
        "", metavar="HOST:PORT", help="Where the admission webhook listens ('' = off)."
    ),
    webhook_cert_dir: str = typer.Option(
        None, metavar="DIR", help="Directory with tls.crt and tls.key for the webhook."
    ),
    webhook_allowed_users: str = typer.Option(
        "",
        metavar="USERS",
        help="Users allowed to write tessera.dev/gpu-assignment, comma-separated (default: own SA).",
    ),
    webhook_device_plugin_users: str = typer.Option(
        "",
        metavar="USERS",
        help="Users allowed to write tessera.dev/gpu-allocated, comma-separated "
        "(default: the <release>-device-plugin account next to our own).",
    ),
    min_cycle_gap: str = typer.Option(
        "50ms",
        metavar="TIME",
        help="Run a cycle as soon as a pod waits, but no sooner than this after the last ('' = every --cycle-period only).",
    ),
    bind_workers: int = typer.Option(
        8, min=1, max=256, help="Threads carrying out binds (asynchronous binding)."
    ),
    whole_gpu_resource: str = typer.Option(
        WHOLE_GPU_RESOURCE,
        metavar="NAME",
        help="Whole-GPU resource Tessera's device plugin serves, as in the chart ('' = NVIDIA's plugin does: "
        "only fractional pods wait for Tessera's device plugin after their bind).",
    ),
    usage_window: str = typer.Option(
        "", metavar="TIME", help="Time-based fair share: window of queues' recent usage, e.g. 7d ('' = off)."
    ),
    usage_half_life: str = typer.Option("", metavar="TIME", help="Half-life of past usage ('' = no decay)."),
    usage_k_value: float = typer.Option(
        1.0, metavar="K", help="Weight of recent usage (KAI's kValue, >= 0)."
    ),
    usage_resolution: str = typer.Option(
        "", metavar="TIME", help="Bucket length of the usage history ('' = window / 168)."
    ),
    usage_configmap: str = typer.Option(
        "tessera-usage-history", metavar="NAME", help="ConfigMap that keeps the usage history."
    ),
    usage_namespace: str = typer.Option(
        "", metavar="NAMESPACE", help="Its namespace ('' = $POD_NAMESPACE, else --leader-elect-namespace)."
    ),
    kai_compat: bool = typer.Option(
        False, help="Also read KAI Scheduler's Queue and PodGroup objects (scheduling.run.ai)."
    ),
    max_victim_grace: str = typer.Option(
        "30s",
        metavar="TIME",
        help="Longest grace period a victim of reclaim, preempt or consolidation gets "
        "('' = its own, however long).",
    ),
    disruption_budgets: str = typer.Option(
        "delete",
        metavar="POLICY",
        help="Where a PodDisruptionBudget refuses a victim's eviction: delete "
        "(KAI Scheduler's behaviour) or respect (other victims are chosen).",
    ),
    version: VersionOption = False,
) -> None:
    """Schedule the pods whose spec.schedulerName is --scheduler-name."""
    # Every flag is checked before anything starts.
    check_choice(log_level.lower(), LOG_LEVELS, "--log-level")
    check_choice(disruption_budgets, BUDGET_POLICIES, "--disruption-budgets")
    eviction = EvictionPolicy(
        max_grace_s=seconds(max_victim_grace, "--max-victim-grace", positive=False)
        if max_victim_grace
        else None,
        budgets="delete" if disruption_budgets == "delete" else "respect",
    )
    if placement:
        check_choice(placement, policy_names(), "--placement")
    period_s = seconds(cycle_period, "--cycle-period")
    usage = usage_params(usage_window, usage_half_life, usage_k_value, usage_resolution)
    gap_s = seconds(min_cycle_gap, "--min-cycle-gap", positive=False) if min_cycle_gap else None
    listen_at = host_port(listen, "--listen") if listen else None
    webhook_at = host_port(webhook_listen, "--webhook-listen") if webhook_listen else None
    if webhook_at is not None:
        if not webhook_cert_dir:
            raise typer.BadParameter(
                "the webhook needs a certificate (the API server only calls HTTPS)",
                param_hint="--webhook-cert-dir",
            )
        missing = [f for f in ("tls.crt", "tls.key") if not (Path(webhook_cert_dir) / f).is_file()]
        if missing:
            raise typer.BadParameter(
                f"{webhook_cert_dir} has no {' or '.join(missing)}", param_hint="--webhook-cert-dir"
            )
    logging.getLogger().setLevel(log_level.upper())
    me = leader_elect_identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    api = api_client(kubeconfig, connections=bind_workers + 24)
    if kai_compat and (problem := access_problem(client.CustomObjectsApi(api))):
        raise CommandError(f"--kai-compat: {problem}")
    runner = SchedulerRunner(
        api,
        RunnerConfig(
            identity=me,
            scheduler_name=scheduler_name,
            cycle_interval_s=period_s,
            leader_elect=leader_elect,
            lease_namespace=leader_elect_namespace,
            lease_name=leader_elect_lease_name,
            min_cycle_gap_s=gap_s,
            bind_workers=bind_workers,
            whole_gpu_plugin=bool(whole_gpu_resource),
            kai_compat=kai_compat,
            scheduler=SchedulerConfig(
                policy=placement or DEFAULT_POLICY, budget=BudgetLimits.live(), usage=usage, eviction=eviction
            ),
            usage_configmap=usage_configmap,
            usage_namespace=usage_namespace or os.environ.get("POD_NAMESPACE") or leader_elect_namespace,
        ),
        SchedulerMetrics(),
    )
    http = None
    if listen_at is not None:
        host, port = listen_at
        http = SchedulerHTTPServer(runner.metrics.registry, host=host, port=port, view_source=runner.view,
                                   ready=lambda: runner.synced).start()  # fmt: skip
    webhook = None
    if webhook_at is not None and webhook_cert_dir:
        host, port = webhook_at
        allowed = {u.strip() for u in webhook_allowed_users.split(",") if u.strip()}
        if not allowed and (sa := own_service_account()):
            allowed.add(sa)
        plugin = {u.strip() for u in webhook_device_plugin_users.split(",") if u.strip()}
        if not plugin and (sa := own_service_account()):
            plugin.add(sa.removesuffix("-scheduler") + "-device-plugin")
        admission = AdmissionConfig(
            scheduler_name=scheduler_name,
            privileged_users=frozenset(allowed),
            allocation_writers=frozenset(plugin),
            queue_lookup=(
                runner.cluster.kai.queue_lookup()
                if runner.cluster.kai is not None
                else informer_queue_lookup(runner.cluster.informers["Queue"])
            ),
            namespace_check=informer_namespace_check(runner.cluster.informers["Queue"]),
        )
        certs = Path(webhook_cert_dir)
        webhook = WebhookServer(admission, certfile=str(certs / "tls.crt"), keyfile=str(certs / "tls.key"),
                                host=host, port=port).start()  # fmt: skip
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    runner.start()
    log.info("tessera-scheduler %s running (scheduler name %s)", me, scheduler_name)
    done.wait()
    log.info("shutting down: releasing the lease")
    runner.stop()
    for server in (webhook, http):
        if server is not None:
            server.stop()


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("TESSERA_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    house.run(app, "tessera-scheduler")


if __name__ == "__main__":
    main()
