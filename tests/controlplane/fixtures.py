"""pytest fixtures for the real control plane (etcd + kube-apiserver + kube-controller-manager), loaded
from tests/conftest.py. One control plane per test session; namespaces isolate tests.

    control_plane   the started `ControlPlane` (session): `.client()`, `.kubectl(...)`,
                    `.kubeconfig_for_service_account(ns, name)`, `.kubeconfig_for_user(user, groups)`
    kube_admin      an admin `kubernetes.client.ApiClient` (session)
    namespace       a fresh namespace for one test, deleted after it (its `default` ServiceAccount exists)

Binaries come from `KUBEBUILDER_ASSETS` or the folder of `scripts/build_control_plane.sh`, which is run
(with its progress) when they are missing and Go is installed. Without them the tests skip with a one-line
reason, except in CI (`CI` or `TESSERA_REQUIRE_CONTROL_PLANE` set), where a missing binary is a failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from scheduler.sandbox import assets
from scheduler.sandbox.controlplane import ControlPlane
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.install import TesseraInstall
from tests.controlplane.install import install as install_tessera
from tests.controlplane.scene import Scene


def _required() -> bool:
    return bool(os.environ.get("CI") or os.environ.get("TESSERA_REQUIRE_CONTROL_PLANE"))


def _assets() -> Path:
    try:
        return assets.require(build_if_missing=shutil.which("go") is not None)
    except assets.AssetsMissing as exc:
        if _required():
            pytest.fail(f"real API server tests: {exc}", pytrace=False)
        pytest.skip(f"real API server: {exc}")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    folder = _assets()
    workdir = Path(tempfile.mkdtemp(prefix="tessera-cp-"))
    cp = ControlPlane(folder, workdir)
    try:
        cp.start()
    except Exception:
        cp.stop()
        raise
    try:
        yield cp
    finally:
        cp.stop(remove=True)


@pytest.fixture(scope="session")
def kube_admin(control_plane: ControlPlane) -> client.ApiClient:
    return control_plane.client()


@pytest.fixture
def namespace(kube_admin: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(kube_admin)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 30
    while True:  # pods are refused until the serviceaccount controller made the namespace's `default`
        try:
            core.read_namespaced_service_account("default", name)
            break
        except client.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


# ---- Tessera on the control plane (kubetests) --------------------------------------------------------------
#
#     tessera         the chart's CRDs (Established), PriorityClasses, ServiceAccounts and RBAC, installed once;
#                     `.scheduler_client()`, `.agent_client()`, `.device_plugin_client()`: the components'
#                     ServiceAccount identities
#     scene           one test's namespace plus the Nodes, Queues, reports, schedulers and kubelet stand-ins
#                     it makes (`tests/controlplane/scene.py`), all removed when the test ends
#     fault_proxy     an HTTPS reverse proxy in front of the real server that injects 409/410/429/500, slow
#                     answers and dropped watches (`tests/controlplane/faultproxy.py`)


@pytest.fixture(scope="session")
def tessera(control_plane: ControlPlane) -> TesseraInstall:
    return install_tessera(control_plane)


@pytest.fixture
def scene(control_plane: ControlPlane, tessera: TesseraInstall, namespace: str) -> Iterator[Scene]:
    world = Scene(control_plane, tessera, namespace)
    try:
        yield world
    finally:
        world.cleanup()


@pytest.fixture
def fault_proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    proxy = FaultProxy(control_plane).start()
    try:
        yield proxy
    finally:
        proxy.stop()
