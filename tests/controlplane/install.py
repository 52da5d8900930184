"""Tessera's own objects on the test session's control plane, installed once: the chart's CRDs (waited
on until Established), PriorityClasses, ServiceAccounts and RBAC, as the rendered chart
(`deploy/manifests/tessera.yaml`) has them. Each component's identity is its ServiceAccount's token from
the TokenRequest API, so a permission the chart forgot fails the test that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from scheduler.sandbox.controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "deploy" / "helm" / "tessera" / "crds"
MANIFESTS = REPO / "deploy" / "manifests" / "tessera.yaml"
RELEASE_NAMESPACE = "tessera-system"
SCHEDULER_SA = "tessera-scheduler"
AGENT_SA = "tessera-agent"  # the node agent's (its own DaemonSet)
DEVICE_PLUGIN_SA = "tessera-device-plugin"  # the device plugin's (its own DaemonSet)
LEASE_NAME = "tessera-scheduler"  # the only Lease the chart's Role lets the scheduler update
# What the chart installs that the tests need (workloads and webhooks are started by the tests themselves).
_KINDS = {"Namespace", "PriorityClass", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
          "RoleBinding"}  # fmt: skip


def chart_objects(kinds: set[str] | None = None) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
    return [d for d in docs if kinds is None or d.get("kind") in kinds]


@dataclass
class TesseraInstall:
    cp: ControlPlane
    scheduler_token: str
    agent_token: str
    scheduler_kubeconfig: Path
    agent_kubeconfig: Path
    device_plugin_kubeconfig: Path

    @property
    def scheduler_user(self) -> str:
        return f"system:serviceaccount:{RELEASE_NAMESPACE}:{SCHEDULER_SA}"

    def scheduler_client(self) -> client.ApiClient:
        return self.cp.client(self.scheduler_kubeconfig)

    def agent_client(self) -> client.ApiClient:
        return self.cp.client(self.agent_kubeconfig)

    def device_plugin_client(self) -> client.ApiClient:
        return self.cp.client(self.device_plugin_kubeconfig)


def install(cp: ControlPlane) -> TesseraInstall:
    cp.kubectl("apply", "--server-side", "-f", str(CRDS))
    cp.wait_established(CRDS)
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(chart_objects(_KINDS)))
    tokens = {sa: cp.service_account_token(RELEASE_NAMESPACE, sa) for sa in (SCHEDULER_SA, AGENT_SA)}
    return TesseraInstall(
        cp,
        scheduler_token=tokens[SCHEDULER_SA],
        agent_token=tokens[AGENT_SA],
        scheduler_kubeconfig=cp.kubeconfig_for_service_account(RELEASE_NAMESPACE, SCHEDULER_SA),
        agent_kubeconfig=cp.kubeconfig_for_service_account(RELEASE_NAMESPACE, AGENT_SA),
        device_plugin_kubeconfig=cp.kubeconfig_for_service_account(RELEASE_NAMESPACE, DEVICE_PLUGIN_SA),
    )
