"""The KubeletConfiguration (`kubelet.config.k8s.io/v1beta1`) of a sandbox node's real kubelet.

Only what differs from the kubelet's defaults is set, each for a reason:
- no container runtime but fakecri, no cgroups of its own: `cgroupDriver: cgroupfs` (what fakecri reports),
  `cgroupsPerQOS: false`, `enforceNodeAllocatable: []`, `failSwapOn: false`, `failCgroupV1: false` (the
  default of v1.34; v1.35 flips it), no iptables chains, `protectKernelDefaults: false` (it writes the
  tunables, into the namespace's copies: mountns.py);
- the node's own folders for pod logs and volume plugins; no resolv.conf; an empty cwd (mountns.py);
- its server on the node IP (a free port; the API server would reach logs/exec there), anonymous access
  off, client certificates from the sandbox CA, healthz on loopback;
- no image GC (fakecri's images weigh 1 MiB each) and one eviction threshold (`memory.available: 50Mi`,
  merged defaults off: the other defaults watch disks that are the host's and would evict at random);
- `systemReserved`: what the sandbox's `--cpu`/`--memory` leave of the host (allocatable is the host's
  capacity minus this and minus the eviction threshold), none by default;
- node status computed every 2 s (it is written only when it changed, the Lease is the heartbeat): a device
  plugin's registration reaches allocatable within 2 s, not 10;
- no certificate rotation or TLS bootstrap (the sandbox issues the client certificate), no graceful node
  shutdown (it would take an inhibitor lock from the host's logind);
- `InPlacePodVerticalScaling` off: without pod cgroups there is nothing to resize, and v1.34 dereferences
  the missing pod cgroup config when a pod's actuated-resources record is gone (a nil-pointer panic of the
  kubelet, seen when a pod is force-deleted right after its container started).
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

EVICTION_MEMORY = "50Mi"


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class X509(_Camel):
    client_ca_file: str = Field(alias="clientCAFile")


class Authentication(_Camel):
    anonymous: dict[str, bool] = {"enabled": False}
    webhook: dict[str, bool] = {"enabled": False}
    x509: X509


class KubeletConfiguration(_Camel):
    api_version: str = "kubelet.config.k8s.io/v1beta1"
    kind: str = "KubeletConfiguration"
    container_runtime_endpoint: str
    image_service_endpoint: str
    address: str
    port: int
    read_only_port: int = 0
    healthz_bind_address: str = "127.0.0.1"
    healthz_port: int
    authentication: Authentication
    authorization: dict[str, str] = {"mode": "AlwaysAllow"}
    cgroup_driver: str = "cgroupfs"
    cgroups_per_qos: bool = Field(False, alias="cgroupsPerQOS")
    enforce_node_allocatable: list[str] = []
    fail_swap_on: bool = False
    fail_cgroup_v1: bool = False
    make_ip_tables_util_chains: bool = Field(False, alias="makeIPTablesUtilChains")
    protect_kernel_defaults: bool = False
    pod_logs_dir: str
    volume_plugin_dir: str
    resolv_conf: str = ""
    eviction_hard: dict[str, str] = {"memory.available": EVICTION_MEMORY}
    merge_default_eviction_settings: bool = False
    image_gc_high_threshold_percent: int = Field(100, alias="imageGCHighThresholdPercent")
    image_gc_low_threshold_percent: int = Field(99, alias="imageGCLowThresholdPercent")
    system_reserved: dict[str, str] = {}
    max_pods: int = 110  # the kubelet's default; `sandbox up --max-pods` sets fewer slots to try the rule
    rotate_certificates: bool = False
    server_tls_bootstrap: bool = Field(False, alias="serverTLSBootstrap")
    node_status_update_frequency: str = "2s"
    sync_frequency: str = "30s"
    shutdown_grace_period: str = "0s"
    feature_gates: dict[str, bool] = {"InPlacePodVerticalScaling": False}

    def yaml(self) -> str:
        doc: dict[str, Any] = self.model_dump(by_alias=True)
        return yaml.safe_dump(doc, sort_keys=False)
