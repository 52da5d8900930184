"""Connect to the Kubernetes API: in-cluster service account first, then a kubeconfig."""

from __future__ import annotations

from typing import Any

from node_agent.oneline import first_line


class ClusterUnavailable(RuntimeError):
    """No usable cluster configuration; the message is one line."""


def api_client(kubeconfig: str | None = None) -> Any:
    """A configured `kubernetes.client.ApiClient`."""
    from kubernetes import client, config

    if kubeconfig is None:
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            pass  # not in a pod: fall back to ~/.kube/config or $KUBECONFIG
    try:
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    except Exception as exc:
        where = kubeconfig or "the default kubeconfig"
        raise ClusterUnavailable(f"no Kubernetes cluster: cannot load {where}: {first_line(exc)}") from None
    return client.ApiClient(configuration)
