"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and (optionally)
kube-controller-manager, started as processes from the envtest-layout folder of `assets.py`.

The API server serves TLS with a certificate from the sandbox's own CA, authorizes with `Node,RBAC` and
runs its default admission plugins plus `NodeRestriction`, so what works here works on a cluster:
- the harness is `admin` (client certificate, group `system:masters`);
- controllers and kubelets are the users Kubernetes' bootstrap RBAC knows them as (client certificates:
  `system:kube-controller-manager`, `system:node:<name>` in `system:nodes`);
- Tessera's components run as their ServiceAccounts with tokens from the TokenRequest API
  (`kubeconfig_for_service_account`), so a permission the chart forgot fails here as it would there.

Everything lives under one work folder (data, certificates, kubeconfigs, logs) that `stop` can remove.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from kubernetes import client, config

from scheduler.sandbox.pki import CertFiles, CertificateAuthority, service_account_keys
from scheduler.sandbox.processes import die_with_parent

ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR = "10.96.0.0/16"


class ControlPlaneError(RuntimeError):
    """A control-plane process did not start or died; the message names its log file."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControlPlane:
    """Start with `start()` (or `with ControlPlane(...) as cp:`), stop with `stop()`."""

    def __init__(
        self,
        assets: Path,
        workdir: Path,
        *,
        controller_manager: bool = True,
        kube_scheduler: bool = False,
        controllers: str = "*",
        apiserver_args: Sequence[str] = (),
        verbosity: int = 0,
        attached: bool = True,
    ) -> None:
        """`attached`: the processes die with the thread that starts them (a test, a benchmark); `tessera
        sandbox up` detaches them (they outlive the command)."""
        self.assets = assets
        self.workdir = workdir
        self.with_controller_manager = controller_manager
        self.with_kube_scheduler = kube_scheduler
        self.controllers = controllers
        self.apiserver_args = tuple(apiserver_args)
        self.verbosity = verbosity
        self.attached = attached
        self.pki_dir = workdir / "pki"
        self.log_dir = workdir / "logs"
        self.kubeconfig_dir = workdir / "kubeconfigs"
        self.etcd_port = 0
        self.port = 0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._ca: CertificateAuthority | None = None
        self._sa_keys: CertFiles | None = None

    # ------------------------------------------------------------------------------------- facts
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca(self) -> CertificateAuthority:
        if self._ca is None:
            raise ControlPlaneError("the control plane is not started")
        return self._ca

    @property
    def ca_file(self) -> Path:
        return self.ca.cert_file

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig_dir / "admin.kubeconfig"

    def log_file(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"

    # ----------------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self, timeout_s: float = 120.0) -> ControlPlane:
        for d in (self.pki_dir, self.log_dir, self.kubeconfig_dir):
            d.mkdir(parents=True, exist_ok=True)
        self._ca = CertificateAuthority(self.pki_dir)
        self._sa_keys = service_account_keys(self.pki_dir)
        self.etcd_port, self.port = free_port(), free_port()
        try:
            self._start_etcd(timeout_s)
            self._start_apiserver(timeout_s)
            if self.with_controller_manager:
                self._start_controller_manager(timeout_s)
            if self.with_kube_scheduler:
                self._start_kube_scheduler(timeout_s)
        except BaseException:
            self.stop(remove=False)
            raise
        return self

    def stop(self, *, remove: bool = False) -> None:
        """Stop every process, last started first, each before the next (TERM, then KILL after 10 s): an
        API server that loses etcd while it shuts down takes its full timeout. `remove` deletes the work
        folder too."""
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {proc.returncode}; its log: {self.log_file(name)}\n{self._tail(name)}"
                )

    # ------------------------------------------------------------------------------- processes
    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = self.log_file(name).open("ab")
        proc = subprocess.Popen(
            [str(self.assets / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stop() signals the group
            cwd=self.workdir,
            preexec_fn=die_with_parent if self.attached else None,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def _tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _wait(self, what: str, component: str, probe: Any, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self.check_alive()
            try:
                if probe():
                    return
            except (OSError, urllib.error.URLError, client.ApiException):
                pass
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{what} not ready after {timeout_s:.0f} s; log: {self.log_file(component)}\n"
                    + self._tail(component)
                )
            time.sleep(0.2)

    def _start_etcd(self, timeout_s: float) -> None:
        peer = free_port()
        client_url = f"http://127.0.0.1:{self.etcd_port}"
        self._spawn(
            "etcd",
            [
                "--name=sandbox",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=sandbox=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",  # a throw-away store: durability would only slow the tests
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client_url}/health", timeout=2) as r:
                return bool(r.status == 200)

        self._wait("etcd", "etcd", healthy, timeout_s)

    def _start_apiserver(self, timeout_s: float) -> None:
        assert self._sa_keys is not None
        serving = self.ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            hosts=("127.0.0.1", "localhost", "10.96.0.1", "kubernetes", "kubernetes.default",
                   "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
            server=True,
        )  # fmt: skip
        admin = self.ca.issue("admin", common_name="admin", organizations=("system:masters",))
        self._write_kubeconfig(self.admin_kubeconfig, "admin", cert=admin)
        args = [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.pki_dir / 'apiserver'}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.ca.cert_file}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={self._sa_keys.cert}",
            f"--service-account-signing-key-file={self._sa_keys.key}",
            "--profiling=false",
            f"--v={self.verbosity}",
            *self.apiserver_args,
        ]
        self._spawn("kube-apiserver", args)
        ctx = ssl.create_default_context(cafile=str(self.ca.cert_file))
        ctx.load_cert_chain(str(admin.cert), str(admin.key))

        def ready() -> bool:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=5, context=ctx) as r:
                return bool(r.status == 200)

        self._wait("kube-apiserver", "kube-apiserver", ready, timeout_s)

    def _start_controller_manager(self, timeout_s: float) -> None:
        assert self._sa_keys is not None
        kubeconfig = self.kubeconfig_for_user("system:kube-controller-manager", name="controller-manager")
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.pki_dir / 'controller-manager'}",
                "--use-service-account-credentials=true",  # each controller as its own ServiceAccount
                f"--service-account-private-key-file={self._sa_keys.key}",
                f"--root-ca-file={self.ca.cert_file}",
                f"--cluster-signing-cert-file={self.ca.cert_file}",
                f"--cluster-signing-key-file={self.ca.key_file}",
                f"--controllers={self.controllers}",
                # its default, /usr/libexec/kubernetes/kubelet-plugins/volume/exec, would be created on the host
                f"--flex-volume-plugin-dir={self.workdir / 'volume-plugins'}",
                "--leader-elect=false",
                f"--v={self.verbosity}",
            ],
        )
        core = client.CoreV1Api(self.client())
        # The ServiceAccount admission plugin refuses pods until the namespace's `default` account
        # exists; the controller-manager's serviceaccount controller makes it.
        self._wait(
            "kube-controller-manager",
            "kube-controller-manager",
            lambda: core.read_namespaced_service_account("default", "default") is not None,
            timeout_s,
        )

    def _start_kube_scheduler(self, timeout_s: float) -> None:
        """The default scheduler, for pods that do not name Tessera (as every cluster has one)."""
        kubeconfig = self.kubeconfig_for_user("system:kube-scheduler", name="kube-scheduler")
        port = free_port()
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.pki_dir / 'kube-scheduler'}",
                "--leader-elect=false",
                f"--v={self.verbosity}",
            ],
        )
        # Its serving certificate is self-signed (generated at start); only liveness is read here.
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        def healthy() -> bool:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/healthz", timeout=2, context=insecure
            ) as r:
                return bool(r.status == 200)

        self._wait("kube-scheduler", "kube-scheduler", healthy, timeout_s)

    # ---------------------------------------------------------------------------------- identities
    def _write_kubeconfig(
        self, path: Path, user: str, *, cert: CertFiles | None = None, token: str | None = None
    ) -> Path:
        creds: dict[str, str] = {}
        if cert is not None:
            creds = {"client-certificate": str(cert.cert), "client-key": str(cert.key)}
        if token is not None:
            creds = {"token": token}
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "sandbox",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": user, "user": creds}],
            "contexts": [{"name": user, "context": {"cluster": "sandbox", "user": user}}],
            "current-context": user,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)
        return path

    def kubeconfig_for_user(self, user: str, groups: Sequence[str] = (), *, name: str | None = None) -> Path:
        """A kubeconfig authenticating as `user` in `groups` by client certificate (for kubelets:
        `system:node:<node>` in `system:nodes`; for controllers: their bootstrap user names)."""
        file_name = name or user.replace(":", "-")
        cert = self.ca.issue(f"user-{file_name}", common_name=user, organizations=tuple(groups))
        return self._write_kubeconfig(self.kubeconfig_dir / f"{file_name}.kubeconfig", user, cert=cert)

    def service_account_token(
        self,
        namespace: str,
        name: str,
        *,
        expiration_s: int = 24 * 3600,
        bound_object: client.V1BoundObjectReference | None = None,
    ) -> str:
        """A token for the ServiceAccount from the TokenRequest API, as the kubelet gets one for a pod
        (bind it to a Pod or Node with `bound_object` to get the node claims)."""
        spec = client.V1TokenRequestSpec(
            audiences=[ISSUER], expiration_seconds=expiration_s, bound_object_ref=bound_object
        )
        core = client.CoreV1Api(self.client())
        answer = core.create_namespaced_service_account_token(
            name, namespace, client.AuthenticationV1TokenRequest(spec=spec)
        )
        if answer.status is None or not answer.status.token:
            raise ControlPlaneError(f"TokenRequest for {namespace}/{name} returned no token")
        return str(answer.status.token)

    def kubeconfig_for_service_account(
        self,
        namespace: str,
        name: str,
        *,
        bound_object: client.V1BoundObjectReference | None = None,
        file_name: str | None = None,
        expiration_s: int = 24 * 3600,
    ) -> Path:
        """A kubeconfig holding a TokenRequest token of the ServiceAccount (`file_name` tells apart several
        tokens of one account, e.g. one bound to each Node)."""
        token = self.service_account_token(
            namespace, name, bound_object=bound_object, expiration_s=expiration_s
        )
        user = f"system:serviceaccount:{namespace}:{name}"
        path = self.kubeconfig_dir / f"sa-{namespace}-{file_name or name}.kubeconfig"
        return self._write_kubeconfig(path, user, token=token)

    def wait_established(self, crds: Path | Sequence[str], timeout_s: float = 60.0) -> None:
        """Wait until each CRD (by name, or every CRD in a YAML file or a folder's *.yaml) is Established.
        Polled through the API: `kubectl wait` on a CRD created a moment ago fails at once, while its
        status has no conditions yet."""
        if isinstance(crds, Path):
            files = sorted(crds.glob("*.yaml")) if crds.is_dir() else [crds]
            docs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
            names = [str(d["metadata"]["name"]) for d in docs if d.get("kind") == "CustomResourceDefinition"]
        else:
            names = list(crds)
        api = client.ApiextensionsV1Api(self.client())

        def established(name: str) -> bool:
            crd = api.read_custom_resource_definition(name)
            conditions = (crd.status.conditions if crd.status else None) or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        deadline = time.monotonic() + timeout_s
        for name in names:
            while not established(name):
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"CRD {name} not Established after {timeout_s:.0f} s")
                time.sleep(0.1)

    def client(self, kubeconfig: Path | None = None) -> client.ApiClient:
        """An ApiClient for `kubeconfig` (default: admin)."""
        return config.new_client_from_config(config_file=str(kubeconfig or self.admin_kubeconfig))

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        input: str | None = None,
        check: bool = True,
        timeout_s: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this control plane."""
        cmd = [str(self.assets / "kubectl"), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args]
        return subprocess.run(
            cmd, input=input, capture_output=True, text=True, check=check, timeout=timeout_s
        )
