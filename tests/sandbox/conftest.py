"""One `tessera sandbox` for the session, started with the real command (`tessera sandbox up`) and
stopped with `tessera sandbox down`, which must leave no process behind (checked at teardown)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.sandbox.processes import ProcessTable, alive
from scheduler.sandbox.sandbox import Sandbox
from tests.controlplane.fixtures import _assets
from tests.sandbox.env import SandboxEnv

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


@pytest.fixture(scope="session")
def sandbox_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    assets = _assets()
    data_dir = tmp_path_factory.mktemp("sandbox")
    env = {**os.environ, "KUBEBUILDER_ASSETS": str(assets)}
    yield data_dir, env


@pytest.fixture(scope="session")
def sandbox(sandbox_env: tuple[Path, dict[str, str]]) -> Iterator[SandboxEnv]:
    data_dir, env = sandbox_env
    up = tessera("sandbox", "up", f"--nodes={NODES}", f"--gpus={GPUS}", f"--data-dir={data_dir}", env=env)
    table = ProcessTable(data_dir)
    try:
        assert up.returncode == 0, f"tessera sandbox up failed ({up.returncode}):\n{up.stderr}"
        kubeconfig = up.stdout.strip().splitlines()[-1]
        state = Sandbox(data_dir).state()
        assert state is not None and state.kubeconfig == kubeconfig
        yield SandboxEnv(state, Path(env["KUBEBUILDER_ASSETS"]) / "kubectl")
    finally:
        records = table.records()
        down = tessera("sandbox", "down", f"--data-dir={data_dir}", env=env)
        left = [r.name for r in records if alive(r)]
        assert down.returncode == 0, f"tessera sandbox down failed: {down.stderr}"
        assert not left, f"tessera sandbox down left processes running: {left}"
        assert not data_dir.exists(), "tessera sandbox down left its data folder"
