"""Every command the documentation shows works as written (tests/docs/doc_commands.py finds them).

- `run` commands run, from a folder that looks like the repository (so files they write land in a
  temporary folder), and must exit 0 and show the output their marker promises;
- `server` commands must start and still be up after a few seconds;
- `slow` commands (benchmarks, trace replays) have their options parsed by the real command line; with
  TESSERA_DOCS_SLOW=1 they run too:  TESSERA_DOCS_SLOW=1 python -m pytest tests/docs -k slow
- `cluster` commands: tessera's have their options parsed; the install guide's kubectl commands that a
  bare control plane can serve run with the real kubectl against the real API server (the others need
  the chart running: the sandbox's end-to-end test covers them);
- `setup` lines (venv, pip) run without their install part; `ci` lines are what CI itself runs.

A command the test cannot place fails it: documentation cannot rot silently.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import yaml

from tests.deploy.deploy_support import needs_helm, render_chart
from tests.docs.doc_commands import ROOT, Command, documented_commands

COMMANDS = documented_commands()
BIN = Path(sys.executable).parent
SLOW = os.environ.get("TESSERA_DOCS_SLOW", "") not in ("", "0")


def _unique(kind: str) -> list[Command]:
    seen: dict[str, Command] = {}
    for c in COMMANDS:
        if c.kind == kind and c.text not in seen:
            seen[c.text] = c
        elif c.kind == kind:
            seen[c.text].outputs += c.outputs
    return list(seen.values())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that looks like the repository (its entries symlinked) next to a `shared` link, so
    documented relative paths (examples/..., ../shared/traces) resolve and written files stay here."""
    base = tmp_path_factory.mktemp("docs")
    view = base / "repo"
    view.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".venv") and not entry.name.startswith(".pytest"):
            (view / entry.name).symlink_to(entry)
    shared = ROOT.parent / "shared"
    if shared.is_dir():
        (base / "shared").symlink_to(shared)
    return view


def env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "100",
            "TESSERA_ARRAY_BACKEND": "numpy"}  # fmt: skip


def shell(text: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", text], cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout
    )


def squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def check_output(c: Command, out: str) -> None:
    for want in c.outputs:
        assert squeeze(want) in squeeze(out), f"{c.where}: `{c.text}` should print {want!r}\n{out}"


def test_every_documented_command_is_known() -> None:
    kinds = {"run", "slow", "server", "cluster", "setup", "ci"}
    assert COMMANDS, "no documented command found: the extractor is broken"
    assert all(c.kind in kinds for c in COMMANDS)
    for c in COMMANDS:
        first = c.argv[0]
        known = first in ("tessera", "kubectl", "helm", "docker", "bash", "python", "python3")
        assert known or first.startswith(("tessera-", ".venv/bin/")), (
            f"{c.where}: unknown program in `{c.text}`"
        )


@pytest.mark.parametrize("c", _unique("run"), ids=lambda c: c.where)
def test_runs_as_written(c: Command, workdir: Path) -> None:
    done = shell(c.text, workdir)
    assert done.returncode == 0, f"{c.where}: `{c.text}` exited {done.returncode}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
    check_output(c, done.stdout + done.stderr)


@pytest.mark.parametrize("c", _unique("setup"), ids=lambda c: c.where)
def test_setup_lines_work_after_their_install(c: Command, workdir: Path) -> None:
    steps = [s.strip() for s in c.text.split("&&")]
    rest = [s.replace(".venv/bin/", "") for s in steps if "pip install" not in s and "-m venv" not in s]
    rest = [s for s in rest if "pytest" not in s]  # the test suite: what is running this test
    if not rest:
        pytest.skip(f"{c.where}: only installs, and runs the test suite itself")
    done = shell(" && ".join(rest), workdir)
    assert done.returncode == 0, f"{c.where}: `{' && '.join(rest)}`\n{done.stderr[-2000:]}"


@pytest.mark.parametrize("c", _unique("server"), ids=lambda c: c.where)
def test_servers_start_and_stay_up(c: Command, workdir: Path) -> None:
    proc = subprocess.Popen(["bash", "-c", f"exec {c.text}"], cwd=workdir, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, f"{c.where}: `{c.text}` stopped: {proc.communicate()[1][-2000:]}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _tessera_apps() -> dict[str, typer.Typer]:
    from device_plugin.cli import app as plugin
    from node_agent.cli import app as agent
    from scheduler.cli.kubectl import app as kubectl_tessera
    from scheduler.cli.main import app as tessera
    from scheduler.kube.main import app as scheduler

    return {"tessera": tessera, "kubectl-tessera": kubectl_tessera, "tessera-scheduler": scheduler,
            "tessera-agent": agent, "tessera-device-plugin": plugin}  # fmt: skip


def parse_only(argv: list[str]) -> None:
    """Parse `argv` with the real command line (options, types, ranges) without running anything."""
    if argv[:2] == ["kubectl", "tessera"]:
        argv = ["kubectl-tessera", *argv[2:]]
    elif argv[:3] == ["python", "-m", "scheduler.cli.main"]:
        argv = ["tessera", *argv[3:]]
    command = typer.main.get_command(_tessera_apps()[argv[0]])
    ctx = command.make_context(argv[0], list(argv[1:]))

    def left(ctx: typer.Context) -> list[str]:
        protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])
        return [*protected, *ctx.args]

    while hasattr(command, "resolve_command") and left(ctx):
        name, sub, rest = command.resolve_command(ctx, left(ctx))
        assert sub is not None, f"no subcommand {name}"
        command, ctx = sub, sub.make_context(name or "", rest, parent=ctx)


def _parseable(kind: str) -> list[Command]:
    def ours(c: Command) -> bool:
        a = c.argv
        return a[0].startswith("tessera") or a[:2] == ["kubectl", "tessera"] or a[:2] == ["python", "-m"]

    return [c for c in _unique(kind) if ours(c) and "POD" not in c.argv]


@pytest.mark.parametrize("c", _parseable("slow") + _parseable("cluster"), ids=lambda c: c.where)
def test_options_of_slow_and_cluster_commands_parse(c: Command) -> None:
    parse_only(c.argv)


@pytest.mark.skipif(not SLOW, reason="slow documented commands run with TESSERA_DOCS_SLOW=1")
@pytest.mark.timeout(3600)  # the suite's 300 s would stop a replay with --consolidate on a busy machine
@pytest.mark.parametrize("c", _unique("slow"), ids=lambda c: c.where)
def test_slow_commands_run(c: Command, workdir: Path) -> None:
    done = shell(c.text, workdir, timeout=3600)
    assert done.returncode == 0, f"{c.where}: `{c.text}`\n{done.stderr[-2000:]}"


# The install guide's kubectl commands a bare control plane can serve (no scheduler, no nodes, no
# cert-manager); in order, as the guide runs them.
ON_A_BARE_CONTROL_PLANE = re.compile(
    r"^kubectl (apply -f (examples/install/\S*|deploy/helm/tessera/crds/|deploy/manifests/crds\.yaml)"
    r"|wait --for condition=established crd/\S+|get (queues|podgroups|gpunodereports( -o wide)?|pod half-gpu .*)"
    r"|delete -f examples/install/ --ignore-not-found)$"
)


@pytest.fixture
def bare_control_plane(control_plane: object) -> Iterator[object]:
    yield control_plane


@pytest.mark.apiserver
def test_install_guide_kubectl_commands_on_the_real_api_server(
    bare_control_plane: object, workdir: Path
) -> None:
    from scheduler.sandbox.controlplane import ControlPlane

    assert isinstance(bare_control_plane, ControlPlane)
    kubectl = bare_control_plane.assets / "kubectl"
    guide = [c for c in COMMANDS if c.where.startswith("docs/install.md") and c.kind == "cluster"]
    runnable = [c for c in guide if ON_A_BARE_CONTROL_PLANE.match(c.text)]
    assert len(runnable) >= 8, [c.text for c in guide]
    # What the chart installs first (`helm install`, step 2): its CRDs and PriorityClasses, as rendered.
    needs_helm()
    classes = [o for o in render_chart.render({}) if o["kind"] == "PriorityClass"]
    (workdir.parent / "classes.yaml").write_text(yaml.safe_dump_all(classes))
    for setup in ("deploy/helm/tessera/crds/", str(workdir.parent / "classes.yaml")):
        done = shell(
            f"{kubectl} --kubeconfig {bare_control_plane.admin_kubeconfig} apply -f {setup}", workdir
        )
        assert done.returncode == 0, done.stderr
    shell(f"{kubectl} --kubeconfig {bare_control_plane.admin_kubeconfig} wait --for condition=established "
          "--timeout=30s -f deploy/helm/tessera/crds/", workdir)  # fmt: skip
    for c in runnable:
        argv = [str(kubectl), f"--kubeconfig={bare_control_plane.admin_kubeconfig}", *c.argv[1:]]
        done = shell(shlex.join(argv), workdir, timeout=60)
        assert done.returncode == 0, f"{c.where}: `{c.text}`\n{done.stderr}"
        if c.text == "kubectl get queues":
            assert "team-vision" in done.stdout and "GPU QUOTA" in done.stdout
