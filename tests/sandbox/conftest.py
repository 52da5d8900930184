"""`tessera sandbox` for the tests, one per scope that needs it:

    sandbox           (session) 2 nodes x 2 A100-40GB with REAL kubelets (kubelet v1.34.4 on fakecri, each in
                      its own mount namespace), started in-process with `Sandbox(attached=True).up()`: its
                      processes die with pytest, even a killed one. `sandbox.box` restarts a kubelet or a
                      device plugin (`sandbox.restart("kubelet/gpu-node-2")`).
    standin_sandbox   (session) the same with the kubelet stand-in, started with the real command
                      (`tessera sandbox up --kubelet standin`): for what a real kubelet on this machine cannot
                      run (made-up node sizes) and the stand-in's own tests.
    new_sandbox       a factory for a module's own real-kubelet sandbox (tests that may leave a node broken).

Each is stopped with `tessera sandbox down`, which must leave no process, no folder and no mount behind, and
the host's kernel tunables as they were (checked at teardown). Start times are printed at the end of the run.

Real kubelets need root and a private mount namespace (`scheduler/sandbox/mountns.py`); without them the
tests skip with one line, except in CI (`TESSERA_REQUIRE_CONTROL_PLANE`), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scheduler.sandbox import assets, mountns, real_kubelet
from scheduler.sandbox.processes import ProcessTable, alive
from scheduler.sandbox.sandbox import Sandbox, SandboxError
from tests.controlplane.fixtures import _assets, _required
from tests.sandbox.env import SandboxEnv
from tests.sandbox.start_times import START_TIMES  # "N real kubelets: ready in X s", printed at the end

NODES = 2
GPUS = "2xA100-40GB"


def tessera(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def real_kubelet_assets() -> Path:
    """The binaries with kubelet and fakecri (built if missing and Go is here); skip (fail in CI) when they
    or a private mount namespace are not to be had."""
    _assets()  # the control plane's own skip/fail rules first
    try:
        folder = assets.require(assets.ALL_BINARIES + real_kubelet.BINARIES, build_if_missing=_go_available())
    except assets.AssetsMissing as exc:
        if _required():
            pytest.fail(f"real kubelet tests: {exc}", pytrace=False)
        pytest.skip(f"real kubelets: {exc}")
    reason = mountns.unavailable()
    if reason is not None:
        if _required():
            pytest.fail(f"real kubelet tests: {reason}", pytrace=False)
        pytest.skip(f"real kubelets: {reason}")
    return folder


def _go_available() -> bool:
    return shutil.which("go") is not None


def data_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A sandbox's data folder: short, in the system's temp folder, for its device plugins' Unix socket paths
    to fit in 108 bytes (pytest's folders, an xdist worker's `popen-gwN/` added, are too deep for that).
    `tessera sandbox down` removes it; `stop` keeps its logs in pytest's folder (`logs_of`)."""
    data_dir = Path(tempfile.mkdtemp(prefix=f"tessera-{name}-"))
    _LOGS[data_dir] = tmp_path_factory.mktemp(f"{name}-logs")
    return data_dir


_LOGS: dict[Path, Path] = {}


def logs_of(data_dir: Path) -> Path:
    """Where a sandbox's logs are kept after it stops (pytest's temp folder; next to it, for one not made
    by `data_folder`)."""
    return _LOGS.get(data_dir, data_dir.with_name(data_dir.name + "-logs"))


@pytest.fixture(scope="session")
def sandbox_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    folder = real_kubelet_assets()
    data_dir = data_folder(tmp_path_factory, "sandbox")
    env = {**os.environ, "KUBEBUILDER_ASSETS": str(folder)}
    yield data_dir, env


def start_real(
    data_dir: Path, env: dict[str, str], *, nodes: int, gpus: str, max_pods: int | None = None
) -> SandboxEnv:
    """A sandbox with real kubelets, in this process (its processes die with pytest)."""
    box = Sandbox(data_dir, attached=True)
    began = time.monotonic()
    try:
        state = box.up(nodes=nodes, gpus=gpus, kubelet="real", max_pods=max_pods)
    except SandboxError as exc:
        box.table.stop_all()
        pytest.fail(f"sandbox up with {nodes} real kubelet(s) failed: {exc}", pytrace=False)
    START_TIMES.append(f"{nodes} real kubelet(s) x {gpus}: ready in {time.monotonic() - began:.1f} s")
    return SandboxEnv(state, Path(env["KUBEBUILDER_ASSETS"]) / "kubectl", box=box)


def stop(data_dir: Path, env: dict[str, str], tunables: dict[str, str]) -> None:
    """`tessera sandbox down`, and what it must leave: no process, no folder, no mount, the host's tunables.
    The logs (and each node's fakecri records and kubelet checkpoint) are kept in pytest's temp folder
    (`logs_of`), for a failure to be read after the run."""
    keep = logs_of(data_dir)
    shutil.copytree(data_dir / "logs", keep, dirs_exist_ok=True, ignore_dangling_symlinks=True)
    for node in (data_dir / "nodes").glob("*"):
        for name in ("containers.jsonl", "device-plugins/kubelet_internal_checkpoint"):
            if (node / name).is_file():
                shutil.copy(node / name, keep / f"{node.name}-{Path(name).name}")
    records = ProcessTable(data_dir).records()
    down = tessera("sandbox", "down", f"--data-dir={data_dir}", env=env)
    left = [r.name for r in records if alive(r)]
    assert down.returncode == 0, f"tessera sandbox down failed: {down.stderr}"
    assert not left, f"tessera sandbox down left processes running: {left}"
    assert not data_dir.exists(), "tessera sandbox down left its data folder"
    mounts = [m for m in mountns.mounts_of() if m.startswith(str(data_dir)) or m == "/var/lib"]
    assert not mounts, f"mounts left on the host: {mounts}"
    assert mountns.host_tunables() == tunables, "the host's kernel tunables changed"


@pytest.fixture(scope="session")
def host_tunables() -> dict[str, str]:
    """The host's values of what a kubelet writes at start, read before any sandbox started."""
    return mountns.host_tunables()


@pytest.fixture(scope="session")
def sandbox(sandbox_env: tuple[Path, dict[str, str]], host_tunables: dict[str, str]) -> Iterator[SandboxEnv]:
    data_dir, env = sandbox_env
    try:
        yield start_real(data_dir, env, nodes=NODES, gpus=GPUS)
    finally:
        stop(data_dir, env, host_tunables)


@pytest.fixture(scope="module")
def new_sandbox(
    tmp_path_factory: pytest.TempPathFactory, host_tunables: dict[str, str]
) -> Iterator[Callable[..., SandboxEnv]]:
    """`new_sandbox(nodes, gpus, max_pods=None)`: this module's own sandbox with real kubelets (one per
    module)."""
    folder = real_kubelet_assets()
    env = {**os.environ, "KUBEBUILDER_ASSETS": str(folder)}
    data_dir = data_folder(tmp_path_factory, "sandbox")
    started: list[SandboxEnv] = []

    def make(nodes: int, gpus: str, max_pods: int | None = None) -> SandboxEnv:
        assert not started, "one sandbox per module"
        started.append(start_real(data_dir, env, nodes=nodes, gpus=gpus, max_pods=max_pods))
        return started[0]

    try:
        yield make
    finally:
        if started:
            stop(data_dir, env, host_tunables)


@pytest.fixture(scope="session")
def standin_sandbox(
    tmp_path_factory: pytest.TempPathFactory, host_tunables: dict[str, str]
) -> Iterator[SandboxEnv]:
    """2 stand-in nodes, started with the real command (detached, as a user's)."""
    folder = _assets()
    data_dir = data_folder(tmp_path_factory, "standin")
    env = {**os.environ, "KUBEBUILDER_ASSETS": str(folder)}
    began = time.monotonic()
    up = tessera("sandbox", "up", "--kubelet=standin", f"--nodes={NODES}", f"--gpus={GPUS}",
                 f"--data-dir={data_dir}", env=env)  # fmt: skip
    try:
        assert up.returncode == 0, f"tessera sandbox up failed ({up.returncode}):\n{up.stderr}"
        START_TIMES.append(f"{NODES} kubelet stand-in(s) x {GPUS}: ready in {time.monotonic() - began:.1f} s")
        kubeconfig = up.stdout.strip().splitlines()[-1]
        state = Sandbox(data_dir).state()
        assert state is not None and state.kubeconfig == kubeconfig and state.kubelet == "standin"
        yield SandboxEnv(state, folder / "kubectl")
    finally:
        stop(data_dir, env, host_tunables)
