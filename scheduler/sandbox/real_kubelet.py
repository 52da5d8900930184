"""A sandbox node's real kubelet: `kubelet` (k8s.io/kubernetes at the control plane's release) on `fakecri`
(our CRI runtime without containers, `scripts/control_plane/fakecri`), both built by
`scripts/build_control_plane.sh`.

Per node, under `<data>/nodes/<name>/`:

    cri.sock            fakecri's socket (the kubelet's runtime and image endpoint)
    containers.jsonl    one JSON line per CreateContainer: what each container was given (env, mounts,
                        devices, CDI devices, annotations), so the device plugins' Allocate answers
    kubelet-config.yaml the KubeletConfiguration (kubelet_config.py)
    root/               the kubelet's --root-dir (pods/, pod-resources/kubelet.sock, checkpoints)
    pki/                its --cert-dir (serving certificate, self-signed)
    device-plugins/     seen by the kubelet as /var/lib/kubelet/device-plugins (kubelet.sock and its
                        checkpoint `kubelet_internal_checkpoint`); the device plugin serves it
    var-log/            its /var/log; pod-logs/ its podLogsDir (the empty log files fakecri creates)

The kubelet runs in its own mount namespace (mountns.py) as `system:node:<name>` (client certificate), with
`--node-ip` the address of the default-route interface (a kubelet refuses a loopback node IP). Its Node's
capacity is the host's CPU and memory; the sandbox's `--cpu`/`--memory` lower allocatable to what they
ask through `systemReserved` (they cannot raise it above the host's).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from kubernetes.utils.quantity import parse_quantity

from scheduler.sandbox import mountns
from scheduler.sandbox.kubelet_config import EVICTION_MEMORY, X509, Authentication, KubeletConfiguration

BINARIES = ("kubelet", "fakecri")
_SIOCGIFADDR = 0x8915
_RTF_UP = 0x1


class HostError(RuntimeError):
    """The host cannot give a real kubelet what it needs (an address, the resources asked for)."""


@dataclass(frozen=True)
class NodeDir:
    """The folders and files of one node (see the module doc)."""

    path: Path

    @property
    def plugin_dir(self) -> Path:
        return self.path / "device-plugins"

    @property
    def cri_socket(self) -> Path:
        return self.path / "cri.sock"

    @property
    def record(self) -> Path:
        return self.path / "containers.jsonl"

    @property
    def config(self) -> Path:
        return self.path / "kubelet-config.yaml"

    @property
    def root_dir(self) -> Path:
        return self.path / "root"

    @property
    def checkpoint(self) -> Path:
        """The device manager's checkpoint: which devices each pod's containers hold, and Allocate's answers."""
        return self.plugin_dir / "kubelet_internal_checkpoint"

    @property
    def pod_resources_socket(self) -> Path:
        return self.root_dir / "pod-resources" / "kubelet.sock"


def node_ip() -> str:
    """The IPv4 address of the interface that holds the default route."""
    iface = ""
    try:
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[1] == "00000000" and int(fields[3], 16) & _RTF_UP:
                iface = fields[0]
                break
    except OSError:
        pass
    if not iface:
        raise HostError(
            "real kubelets need a non-loopback address (no default route here); use --kubelet standin"
        )
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", iface[:15].encode()))
        except OSError as exc:
            raise HostError(f"interface {iface} (default route) has no IPv4 address: {exc}") from None
    return socket.inet_ntoa(packed[20:24])


def host_capacity() -> dict[str, Decimal]:
    """CPU and memory as the kubelet's cAdvisor reports them: online CPUs, MemTotal."""
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {"cpu": Decimal(os.cpu_count() or 1), "memory": Decimal(mem_kib * 1024)}


def system_reserved(cpu: str | None, memory: str | None) -> dict[str, str]:
    """`systemReserved` so that the Node's allocatable is `cpu` and `memory` (None: the host's)."""
    host = host_capacity()
    reserved: dict[str, str] = {}
    if cpu is not None:
        want = parse_quantity(cpu)
        if want > host["cpu"] or want <= 0:
            raise HostError(
                f"--cpu {cpu}: a real kubelet reports this machine's {host['cpu']} CPUs and can offer "
                "between 1m and that; use --kubelet standin for made-up nodes"
            )
        if want < host["cpu"]:
            reserved["cpu"] = f"{int((host['cpu'] - want) * 1000)}m"
    if memory is not None:
        want = parse_quantity(memory)
        room = host["memory"] - parse_quantity(EVICTION_MEMORY)
        if want > room or want <= 0:
            raise HostError(
                f"--memory {memory}: a real kubelet reports this machine's memory and can offer at most "
                f"{int(room) // 2**20}Mi; use --kubelet standin for made-up nodes"
            )
        if want < room:
            reserved["memory"] = f"{int(room - want) // 2**20}Mi"
    return reserved


def write_config(
    node: NodeDir,
    *,
    ca_file: Path,
    ip: str,
    port: int,
    healthz_port: int,
    reserved: dict[str, str],
    max_pods: int,
) -> Path:
    endpoint = f"unix://{node.cri_socket}"
    config = KubeletConfiguration(
        container_runtime_endpoint=endpoint,
        image_service_endpoint=endpoint,
        address=ip,
        port=port,
        healthz_port=healthz_port,
        authentication=Authentication(x509=X509(client_ca_file=str(ca_file))),
        pod_logs_dir=str(node.path / "pod-logs"),
        volume_plugin_dir=str(node.path / "volume-plugins"),
        system_reserved=reserved,
        max_pods=max_pods,
    )
    node.config.write_text(config.yaml())
    return node.config


def fakecri_argv(assets: Path, node: NodeDir, name: str) -> list[str]:
    return [str(assets / "fakecri"), f"--listen=unix://{node.cri_socket}", f"--record={node.record}",
            f"--image-fs={node.path}", f"--node={name}"]  # fmt: skip


def kubelet_argv(assets: Path, node: NodeDir, name: str, *, kubeconfig: Path, ip: str) -> list[str]:
    """The kubelet's command line, wrapped in its mount namespace."""
    mountns.prepare(node.path)
    for sub in ("root", "pki", "pod-logs", "volume-plugins"):
        (node.path / sub).mkdir(parents=True, exist_ok=True)
    kubelet = [
        str(assets / "kubelet"),
        f"--config={node.config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={node.root_dir}",
        f"--cert-dir={node.path / 'pki'}",
        f"--hostname-override={name}",
        f"--node-ip={ip}",
        "--node-labels=node.kubernetes.io/instance-type=tessera-sandbox",
        "--v=2",
    ]
    return mountns.wrap(node.path, kubelet)
