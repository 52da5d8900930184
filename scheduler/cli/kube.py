"""Reaching the cluster from the command line: one way to find credentials, one way to say it failed."""

from __future__ import annotations

from typing import Annotated

import typer
from kubernetes import client, config

from scheduler.api.cli import USAGE, CommandError, first_line

KubeconfigOption = Annotated[
    str | None,
    typer.Option(
        metavar="FILE", help="Kubeconfig (default: in-cluster, then $KUBECONFIG or ~/.kube/config)."
    ),
]
ContextOption = Annotated[str | None, typer.Option(metavar="NAME", help="Kubeconfig context.")]
REQUEST_TIMEOUT_S = 30


def connect(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """An API client as kubectl would build it; a CommandError (exit 2) says what to set when there are
    no credentials at all."""
    configuration = client.Configuration()
    try:
        if kubeconfig is None and context is None:
            try:
                config.load_incluster_config(client_configuration=configuration)
            except config.ConfigException:
                config.load_kube_config(client_configuration=configuration)
        else:
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
    except (config.ConfigException, OSError, ValueError) as exc:
        raise CommandError(
            f"no usable kubeconfig: {first_line(exc)} (pass --kubeconfig FILE, set KUBECONFIG, or run "
            "`tessera sandbox up` for a local cluster)",
            USAGE,
        ) from None
    return client.ApiClient(configuration)
