"""`tessera-scheduler`: the scheduler as a Kubernetes component (leader-elected Deployment)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid

import typer
from kubernetes import client, config

from scheduler.cycle import SchedulerConfig
from scheduler.kube.queue_index import informer_queue_lookup
from scheduler.kube.runner import RunnerConfig, SchedulerRunner
from scheduler.metrics import SchedulerMetrics
from scheduler.webhook.admission import AdmissionConfig
from scheduler.webhook.server import WebhookServer

log = logging.getLogger("tessera.scheduler")

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def api_client(kubeconfig: str | None) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig."""
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return client.ApiClient(configuration)


@app.command()
def run(
    kubeconfig: str = typer.Option(None, help="Kubeconfig file (default: in-cluster, else ~/.kube/config)."),
    policy: str = typer.Option("binpack", help="Placement policy: binpack, spread or fgd."),
    cycle_interval: float = typer.Option(1.0, help="Seconds between scheduling cycles."),
    leader_elect: bool = typer.Option(True, help="Elect a leader on a Lease (run 2+ replicas for HA)."),
    lease_namespace: str = typer.Option("tessera-system", help="Namespace of the leader Lease."),
    identity: str = typer.Option(None, help="This replica's identity (default: hostname + random suffix)."),
    metrics_port: int = typer.Option(8080, help="Port of /metrics (0: off)."),
    webhook_port: int = typer.Option(0, help="Port of the admission webhook (0: off)."),
    tls_cert: str = typer.Option(None, help="Webhook TLS certificate file."),
    tls_key: str = typer.Option(None, help="Webhook TLS key file."),
    scheduler_user: str = typer.Option(
        "system:serviceaccount:tessera-system:tessera-scheduler",
        help="The user allowed to write tessera.dev/gpu-assignment (repeat with commas).",
    ),
    bind_lock_timeout: float = typer.Option(60.0, help="Seconds after which a node bind lock is stale."),
) -> None:
    """Schedule pods with schedulerName: tessera."""
    me = identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    runner = SchedulerRunner(
        api_client(kubeconfig),
        RunnerConfig(
            identity=me,
            cycle_interval_s=cycle_interval,
            leader_elect=leader_elect,
            lease_namespace=lease_namespace,
            lock_timeout_s=bind_lock_timeout,
            scheduler=SchedulerConfig(policy=policy),
        ),
        SchedulerMetrics(),
    )
    if metrics_port:
        runner.metrics.serve(metrics_port)
    webhook = None
    if webhook_port:
        if not tls_cert or not tls_key:
            raise typer.BadParameter(
                "the webhook needs --tls-cert and --tls-key (the API server only calls HTTPS)"
            )
        admission = AdmissionConfig(
            privileged_users=frozenset(u.strip() for u in scheduler_user.split(",") if u.strip()),
            queue_lookup=informer_queue_lookup(runner.cluster.informers["Queue"]),
        )
        webhook = WebhookServer(admission, certfile=tls_cert, keyfile=tls_key, port=webhook_port).start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    runner.start()
    log.info("tessera-scheduler %s running (policy %s)", me, policy)
    done.wait()
    log.info("shutting down: releasing the lease")
    runner.stop()
    if webhook is not None:
        webhook.stop()


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("TESSERA_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    app()


if __name__ == "__main__":
    main()
