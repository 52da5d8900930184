"""`tessera sandbox`: a real Kubernetes API on loopback with fake GPU nodes, in one data folder.

`up` starts, in order: etcd, kube-apiserver, kube-controller-manager and kube-scheduler
(`controlplane.py`); the chart's manifests (`manifests.py`); `tessera-scheduler` with its webhook, as the
ServiceAccount of the chart's Deployment; then per node a kubelet as `system:node:<name>` (by default a
real one on fakecri in its own mount namespace, `real_kubelet.py`; with `kubelet="standin"` the Python
stand-in, `kubelet.py`), and the chart's node DaemonSet containers, `tessera-device-plugin` and
`tessera-agent` on fake GPUs, as the DaemonSet's ServiceAccount with a token bound to the Node (so it
carries the node's name, as a pod's token does). It returns once every node is Ready with its GPUs in its
allocatable and its GPUNodeReport published, and the scheduler leads and has synced. Every process is
recorded (`processes.py`), so `down` stops them all (even after a failed `up`) and removes the folder.
The CLI's processes are detached (they outlive `up`); a test's are attached (`attached=True`: they die
with it).

Layout of the data folder: `sandbox.json` (what runs where), `processes.json`, `kubeconfigs/`
(`admin.kubeconfig` is the one to use), `logs/`, `pki/`, `etcd/`, `webhook-tls/`, and per node
`nodes/<name>/` (`real_kubelet.py` lists a real kubelet's files; a stand-in's are `device-plugins/` and
`containers/`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client
from pydantic import BaseModel

from scheduler.sandbox import assets, components, manifests, mountns, real_kubelet
from scheduler.sandbox.controlplane import ControlPlane, ControlPlaneError, free_port
from scheduler.sandbox.processes import ProcessRecord, ProcessTable, alive
from scheduler.sandbox.readiness import NotReady, Waiter

STATE_FILE = "sandbox.json"
# The components' tokens last as long as the sandbox's certificates (a pod's token would be renewed by
# its kubelet; the sandbox's processes read theirs once).
TOKEN_LIFETIME_S = 30 * 24 * 3600
SOCKET_PATH_MAX = 100  # a Unix socket path must fit in 108 bytes; leave room for the plugin's names
KUBELETS = ("real", "standin")
# What a stand-in node offers when --cpu/--memory are not given (a real kubelet offers the host's).
STANDIN_CPU, STANDIN_MEMORY = "32", "256Gi"
DEFAULT_MAX_PODS, MAX_PODS = 110, 250  # the kubelet's default maxPods; the most a sandbox node is given


class SandboxError(RuntimeError):
    """`up`, `down` or `status` cannot do what was asked; the message is one line (plus where to look)."""


def default_data_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "tessera" / "sandbox"


class NodeInfo(BaseModel):
    name: str
    gpus: str
    kubelet: str = "standin"  # "real" or "standin"
    node_dir: str = ""
    agent_url: str
    plugin_dir: str
    containers_dir: str  # the stand-in's Allocate records (a real kubelet's node has containers.jsonl)


class SandboxState(BaseModel):
    """`sandbox.json`: what `status`, the tests and users need to find the parts."""

    data_dir: str
    kubeconfig: str
    api_url: str
    scheduler_url: str
    webhook_url: str
    kubernetes_version: str
    started_at: str
    kubelet: str = "standin"
    nodes: list[NodeInfo]
    kubectl: str = ""  # the kubectl of the control plane's release (the machine's own may be older)
    scheduler_name: str = "tessera"  # what pods name in spec.schedulerName
    kai_compat: bool = False  # KAI Scheduler's CRDs and default queues installed, read by the scheduler


class Sandbox:
    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        say: Callable[[str], None] = lambda _: None,
        attached: bool = False,
    ) -> None:
        """`attached`: the processes die with the thread that starts them (tests); the CLI detaches them."""
        self.data_dir = (data_dir or default_data_dir()).resolve()
        self.say = say
        self.attached = attached
        self.table = ProcessTable(self.data_dir, attached=attached)

    # ---- queries -------------------------------------------------------------------------------------
    def state(self) -> SandboxState | None:
        try:
            return SandboxState.model_validate_json((self.data_dir / STATE_FILE).read_bytes())
        except (OSError, ValueError):
            return None

    def running(self) -> list[str]:
        return [r.name for r in self.table.records() if alive(r)]

    # ---- up ------------------------------------------------------------------------------------------
    def up(
        self,
        *,
        nodes: int = 2,
        gpus: str = "2xA100-40GB",
        kubelet: str = "real",
        cpu: str | None = None,
        memory: str | None = None,
        max_pods: int | None = None,
        timeout_s: float = 180.0,
        kai_compat: bool = False,
    ) -> SandboxState:
        """`cpu`/`memory`: each node's allocatable; a stand-in's default is 32 CPUs and 256Gi, a real
        kubelet's the host's (it can offer less, not more). `max_pods`: each node's pod slots (the
        kubelet's `maxPods`; 110 by default)."""
        if nodes < 1:
            raise SandboxError("--nodes must be at least 1")
        if max_pods is not None and not 1 <= max_pods <= MAX_PODS:
            raise SandboxError(f"--max-pods {max_pods}: expected 1 to {MAX_PODS}")
        if kubelet not in KUBELETS:
            raise SandboxError(f"--kubelet {kubelet}: expected one of {', '.join(KUBELETS)}")
        node = NodeResources(kubelet, cpu, memory, max_pods or DEFAULT_MAX_PODS)
        if kubelet == "real":
            try:
                mountns.require()
                node.reserved = real_kubelet.system_reserved(cpu, memory)
                node.ip = real_kubelet.node_ip()
            except (mountns.NamespaceUnavailable, real_kubelet.HostError) as exc:
                raise SandboxError(str(exc)) from None
        if self.running():
            raise SandboxError(
                f"a sandbox is already running in {self.data_dir} (tessera sandbox down first)"
            )
        if self.data_dir.exists():
            shutil.rmtree(self.data_dir)  # what a stopped or failed sandbox left behind
        self.data_dir.mkdir(parents=True)
        names = [f"gpu-node-{i + 1}" for i in range(nodes)]
        too_long = self.data_dir / "nodes" / names[-1] / "device-plugins" / "tessera-gpu-slice.sock"
        if len(str(too_long)) > SOCKET_PATH_MAX:
            raise SandboxError(f"--data-dir {self.data_dir} is too long for the device plugins' Unix sockets")
        try:
            return self._up(names, gpus, node, timeout_s, kai_compat)
        except (NotReady, ControlPlaneError) as exc:
            self.table.stop_all()
            raise SandboxError(str(exc)) from None
        except BaseException:
            self.table.stop_all()
            raise

    def _up(
        self, names: list[str], gpus: str, node: NodeResources, timeout_s: float, kai_compat: bool
    ) -> SandboxState:
        needed = assets.ALL_BINARIES + (real_kubelet.BINARIES if node.kubelet == "real" else ())
        folder = assets.find(needed) or self._build()
        self.say(
            f"control plane: etcd {assets.ETCD_VERSION}, Kubernetes {assets.KUBERNETES_VERSION} ({folder})"
        )
        cp = ControlPlane(folder, self.data_dir, kube_scheduler=True, attached=self.attached)
        try:
            cp.start(timeout_s)
        except ControlPlaneError as exc:
            raise SandboxError(str(exc).splitlines()[0] + f" (logs in {cp.log_dir})") from None
        for name, proc in cp.procs.items():
            tier = {"etcd": 0, "kube-apiserver": 1}.get(name, 2)
            self.table.add(name, proc.pid, [str(folder / name)], cp.log_file(name), tier=tier)
        wait = Waiter(cp, timeout_s)
        # The kubelets need only the bootstrap RBAC: they start now and register while the chart and the
        # scheduler come up. Each node's device plugin and agent follow once its Node exists.
        kubelets = [self._start_kubelet(cp, name, node) for name in names]
        self.say("applying the chart's manifests (CRDs, RBAC, PriorityClasses, default Queue)")
        crds = manifests.crds()
        if kai_compat:  # what KAI Scheduler's install would have put there: its CRDs and default queues
            self.say("KAI compatibility: KAI Scheduler's Queue and PodGroup CRDs, its default queues")
            crds += manifests.kai_crds()
        _kubectl(cp, "apply", "--server-side", "--field-manager=tessera-sandbox", docs=crds)
        cp.wait_established([crd["metadata"]["name"] for crd in crds], timeout_s)
        now, webhooks = manifests.for_sandbox(manifests.chart_objects(kai_compat=kai_compat))
        _kubectl(cp, "apply", "--server-side", "--field-manager=tessera-sandbox", docs=now)
        if kai_compat:  # a client-side apply, as a user's: their own `kubectl apply` of them merges quietly
            _kubectl(cp, "apply", docs=manifests.kai_queues())

        scheduler_url, webhook_url, scheduler_name = self._start_scheduler(cp, wait, kai_compat)
        self.say(f"scheduler and webhook up ({scheduler_url}); registering the webhooks")
        hooks = manifests.local_webhooks(webhooks, webhook_url, cp.ca_file.read_bytes())
        _kubectl(cp, "apply", "--server-side", "--field-manager=tessera-sandbox", docs=hooks)

        started = [
            self._start_node(cp, wait, name, gpus, node, recs)
            for name, recs in zip(names, kubelets, strict=True)
        ]
        self.say(f"waiting for {len(names)} node(s) to be Ready with their GPUs and reports")
        for info, recs in started:
            wait.node_ready(info.name, gpus, recs)
        infos = [info for info, _ in started]
        kubeconfig = cp.admin_kubeconfig
        state = SandboxState(
            data_dir=str(self.data_dir),
            kubeconfig=str(kubeconfig),
            api_url=cp.url,
            scheduler_url=scheduler_url,
            webhook_url=webhook_url,
            kubernetes_version=assets.KUBERNETES_VERSION,
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            kubelet=node.kubelet,
            nodes=infos,
            kubectl=str(folder / "kubectl"),
            scheduler_name=scheduler_name,
            kai_compat=kai_compat,
        )
        (self.data_dir / STATE_FILE).write_text(state.model_dump_json(indent=2))
        return state

    def _build(self) -> Path:
        self.say("control-plane binaries not found: building them from Go modules (minutes, once)")
        try:
            return assets.build()
        except assets.AssetsMissing as exc:
            raise SandboxError(str(exc)) from None

    def _start_scheduler(self, cp: ControlPlane, wait: Waiter, kai_compat: bool) -> tuple[str, str, str]:
        pod = components.pod_template(*components.SCHEDULER, kai_compat=kai_compat)
        tls = self.data_dir / "webhook-tls"
        tls.mkdir()
        service = f"tessera-scheduler.{pod.namespace}.svc"
        cert = cp.ca.issue(
            "webhook", common_name=service, hosts=("127.0.0.1", "localhost", service), server=True
        )
        shutil.copy(cert.cert, tls / "tls.crt")
        shutil.copy(cert.key, tls / "tls.key")
        kubeconfig = cp.kubeconfig_for_service_account(
            pod.namespace, pod.service_account, expiration_s=TOKEN_LIFETIME_S
        )
        http_port, webhook_port = free_port(), free_port()
        identity = "sandbox-scheduler"
        argv = components.command_line(
            pod.containers["scheduler"],
            env={"POD_NAME": identity, "POD_NAMESPACE": pod.namespace},
            overrides={
                "--listen": f"127.0.0.1:{http_port}",
                "--webhook-listen": f"127.0.0.1:{webhook_port}",
                "--webhook-cert-dir": str(tls),
            },
            extra=[
                f"--kubeconfig={kubeconfig}",
                # In a pod the scheduler reads its own ServiceAccount from the mounted token.
                f"--webhook-allowed-users=system:serviceaccount:{pod.namespace}:{pod.service_account}",
            ],
        )
        rec = self.table.spawn(
            "tessera-scheduler", argv, self.data_dir / "logs" / "tessera-scheduler.log", cwd=self.data_dir
        )
        scheduler_url = f"http://127.0.0.1:{http_port}"
        webhook_url = f"https://127.0.0.1:{webhook_port}"
        wait.http_ok(f"{scheduler_url}/readyz", "tessera-scheduler", rec)
        wait.http_ok(f"{webhook_url}/healthz", "the admission webhook", rec)
        lease = next(a.split("=", 1)[1] for a in argv if a.startswith("--leader-elect-lease-name="))
        wait.scheduler_leads(pod.namespace, lease, identity, rec)
        name = next(a.split("=", 1)[1] for a in argv if a.startswith("--scheduler-name="))
        return scheduler_url, webhook_url, name

    def _start_kubelet(self, cp: ControlPlane, name: str, node: NodeResources) -> list[ProcessRecord]:
        """The node's kubelet (and, for a real one, its fakecri first); the records to watch."""
        node_dir = self.data_dir / "nodes" / name
        plugin_dir = node_dir / "device-plugins"
        plugin_dir.mkdir(parents=True)
        logs = self.data_dir / "logs"
        kubeconfig = cp.kubeconfig_for_user(f"system:node:{name}", ("system:nodes",))
        if node.kubelet == "standin":
            self.say(f"node {name}: kubelet stand-in")
            argv = [
                *components.executable_module("scheduler.sandbox.kubelet"),
                f"--node-name={name}",
                f"--kubeconfig={kubeconfig}",
                f"--plugin-dir={plugin_dir}",
                f"--state-dir={node_dir}",
                f"--cpu={node.cpu or STANDIN_CPU}",
                f"--memory={node.memory or STANDIN_MEMORY}",
                f"--pods={node.max_pods}",
                f"--kubelet-version={assets.KUBERNETES_VERSION}",
            ]
            return [self.table.spawn(f"kubelet/{name}", argv, logs / f"kubelet-{name}.log", cwd=node_dir)]
        self.say(f"node {name}: kubelet {assets.KUBERNETES_VERSION} on fakecri, node IP {node.ip}")
        paths = real_kubelet.NodeDir(node_dir)
        cri = self.table.spawn(
            f"fakecri/{name}",
            real_kubelet.fakecri_argv(cp.assets, paths, name),
            logs / f"fakecri-{name}.log",
            cwd=node_dir,
            tier=2,  # stopped after the kubelets
        )
        real_kubelet.write_config(
            paths, ca_file=cp.ca_file, ip=node.ip, port=free_port(), healthz_port=free_port(),
            reserved=node.reserved, max_pods=node.max_pods,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not paths.cri_socket.exists():
            if not alive(cri) or time.monotonic() > deadline:
                raise NotReady(f"fakecri/{name} did not serve {paths.cri_socket}; its log {cri.log}")
            time.sleep(0.05)
        argv = real_kubelet.kubelet_argv(cp.assets, paths, name, kubeconfig=kubeconfig, ip=node.ip)
        return [cri, self.table.spawn(f"kubelet/{name}", argv, logs / f"kubelet-{name}.log", cwd=node_dir)]

    def _start_node(
        self, cp: ControlPlane, wait: Waiter, name: str, gpus: str, node: NodeResources,
        kubelets: list[ProcessRecord],
    ) -> tuple[NodeInfo, list[ProcessRecord]]:  # fmt: skip
        node_dir = self.data_dir / "nodes" / name
        plugin_dir = node_dir / "device-plugins"
        logs = self.data_dir / "logs"
        self.say(f"node {name}: device plugin and agent on {gpus}")
        uid = wait.node_registered(name, kubelets)
        bound = client.V1BoundObjectReference(api_version="v1", kind="Node", name=name, uid=uid)
        env = {"NODE_NAME": name}

        def credentials(pod: components.PodTemplate) -> list[str]:
            """The DaemonSet's ServiceAccount, with a token bound to this Node (its node-name claim is
            what the chart's ValidatingAdmissionPolicy keys on)."""
            config = cp.kubeconfig_for_service_account(
                pod.namespace,
                pod.service_account,
                bound_object=bound,
                file_name=f"{pod.service_account}-{name}",
                expiration_s=TOKEN_LIFETIME_S,
            )
            return [f"--kubeconfig={config}", f"--fake-gpus={gpus}"]

        plugin_pod = components.pod_template(*components.DEVICE_PLUGIN)
        # A real kubelet serves PodResources under its own root dir, the stand-in in the node's folder.
        pod_resources = str(
            real_kubelet.NodeDir(node_dir).pod_resources_socket
            if node.kubelet == "real"
            else node_dir / "pod-resources" / "kubelet.sock"
        )
        plugin_argv = components.command_line(
            plugin_pod.containers["tessera-device-plugin"],
            env=env,
            overrides={"--plugin-dir": str(plugin_dir), "--pod-resources-socket": pod_resources},
            extra=credentials(plugin_pod),
        )
        plugin = self.table.spawn(
            f"device-plugin/{name}", plugin_argv, logs / f"device-plugin-{name}.log", cwd=node_dir
        )
        agent_pod = components.pod_template(*components.AGENT)
        agent_port = free_port()
        agent_argv = components.command_line(
            agent_pod.containers["tessera-agent"],
            env=env,
            overrides={"--listen": f"127.0.0.1:{agent_port}", "--proc-root": "/proc"},
            extra=credentials(agent_pod),
        )
        agent = self.table.spawn(f"agent/{name}", agent_argv, logs / f"agent-{name}.log", cwd=node_dir)
        info = NodeInfo(
            name=name,
            gpus=gpus,
            kubelet=node.kubelet,
            node_dir=str(node_dir),
            agent_url=f"http://127.0.0.1:{agent_port}",
            plugin_dir=str(plugin_dir),
            containers_dir=str(node_dir / "containers"),
        )
        return info, [*kubelets, plugin, agent]

    # ---- one process ---------------------------------------------------------------------------------
    def restart(self, name: str, timeout_s: float = 10.0) -> ProcessRecord:
        """Stop a recorded process (`kubelet/gpu-node-1`, `device-plugin/gpu-node-1`, ...) and start it
        again as it was started: what a node's systemd or a DaemonSet's restart does."""
        try:
            return self.table.restart(name, timeout_s)
        except KeyError:
            known = ", ".join(r.name for r in self.table.records())
            raise SandboxError(f"no process {name} in this sandbox (it has {known})") from None

    # ---- down ----------------------------------------------------------------------------------------
    def down(self) -> list[str]:
        """Stop every recorded process and remove the data folder; the names of what was running."""
        if not self.data_dir.exists():
            raise SandboxError(f"no sandbox in {self.data_dir}")
        stopped = self.table.stop_all()
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.data_dir)
        return stopped


@dataclass
class NodeResources:
    """How every node's kubelet runs: which kind, what it offers (None: the default), and, for a real
    kubelet, its node IP and the systemReserved that makes its allocatable what was asked."""

    kubelet: str
    cpu: str | None
    memory: str | None
    max_pods: int
    ip: str = ""
    reserved: dict[str, str] = field(default_factory=dict)


def _kubectl(cp: ControlPlane, *args: str, docs: list[manifests.Manifest]) -> None:
    """Run kubectl on `docs` (as `-f -`); a refusal is a SandboxError with kubectl's first line."""
    proc = cp.kubectl(*args, "-f", "-", input=manifests.dump(docs), check=False, timeout_s=300)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
        raise SandboxError(f"kubectl {args[0]} of the chart's manifests failed: {why}")
