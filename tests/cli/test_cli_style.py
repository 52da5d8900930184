"""One command-line style for every entry point: `--version`, one-line `error:` with exit 2 for the
user's mistakes (never a traceback), options checked before work starts, help that fits 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from device_plugin.cli import app as plugin_app
from node_agent.cli import app as agent_app
from scheduler.api.cli import CommandError, fail, new_app
from scheduler.cli.kubectl import app as kubectl_app
from scheduler.cli.main import app as tessera_app
from scheduler.kube.main import app as scheduler_app

ROOT = Path(__file__).resolve().parents[2]
APPS = {
    "tessera": tessera_app,
    "kubectl tessera": kubectl_app,
    "tessera-scheduler": scheduler_app,
    "tessera-agent": agent_app,
    "tessera-device-plugin": plugin_app,
}
SUBCOMMANDS = [
    ("tessera", ["simulate"]),
    ("tessera", ["replay"]),
    ("tessera", ["bench"]),
    ("tessera", ["bench", "events"]),
    ("tessera", ["nodes"]),
    ("tessera", ["queues"]),
    ("tessera", ["why"]),
    ("tessera", ["doctor"]),
    ("kubectl tessera", ["why"]),
    ("tessera-agent", ["bench"]),
    ("tessera", ["bench", "allocate"]),
]
runner = CliRunner()


def invoke(prog: str, args: list[str]) -> tuple[int, str, str]:
    result = runner.invoke(APPS[prog], args, prog_name=prog, env={"COLUMNS": "80"})
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("prog", sorted(APPS))
def test_every_entry_point_has_version(prog: str) -> None:
    code, out, _ = invoke(prog, ["--version"])
    assert code == 0 and out.strip().startswith(prog + " ") and out.strip().split()[-1][0].isdigit()


@pytest.mark.parametrize(
    ("prog", "args"),
    [*SUBCOMMANDS, ("tessera", ["sandbox"]), ("tessera", ["sandbox", "up"]), ("tessera", ["bench", "e2e"])],
)
def test_every_command_has_version(prog: str, args: list[str]) -> None:
    """The README promises `--version` on every command, subcommands included."""
    code, out, err = invoke(prog, [*args, "--version"])
    assert code == 0 and out.strip().startswith(prog + " ") and out.strip().split()[-1][0].isdigit(), (
        out + err
    )


@pytest.mark.parametrize("prog", sorted(APPS))
def test_unknown_option_is_one_error_line_with_exit_2(prog: str) -> None:
    code, out, err = invoke(prog, ["--no-such-option"])
    assert code == 2, out + err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--no-such-option" in err
    assert "Traceback" not in err and "╭" not in err


@pytest.mark.parametrize(("prog", "args"), [(p, []) for p in sorted(APPS)] + SUBCOMMANDS)
def test_help_fits_80_columns_and_shows_no_bool_type(prog: str, args: list[str]) -> None:
    code, out, _ = invoke(prog, [*args, "--help"])
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "<bool>" not in out and "--help" in out


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["simulate", "--period", "0"], "--period: must be a number of seconds > 0"),
        (["simulate", "--period", "-1"], "--period"),
        (["simulate", "--until", "soon"], "--until"),
        (["simulate", "--policy", "fastest"], "--policy: 'fastest' is not one of"),
        (["simulate", "-o", "xml"], "--output"),
        (["simulate", "--report", "/nonexistent-dir/r.html"], "--report: cannot write"),
        (["replay", "--plot", "/nonexistent-dir/p.png", "--seeds", "1"], "--plot: cannot write"),
        (["replay", "--report", "/nonexistent-dir/r.html", "--seeds", "1"], "--report: cannot write"),
        (["bench", "--nodes", "500", "--init-pods", "10000"], "--init-pods"),
        (["nodes", "-o", "xml"], "--output"),
        # Values typer checks are worded as the house words them, not as the validation library does.
        (["simulate", "--seed", "abc"], "'--seed': 'abc' is not a whole number"),
        (["bench", "--nodes", "1.5"], "'--nodes': '1.5' is not a whole number"),
        (["bench", "--nodes", "0"], "'--nodes': 0 is below the smallest value accepted, 1"),
        (["bench", "e2e", "--fraction-share", "x"], "'--fraction-share': 'x' is not a number"),
        (["sandbox", "up", "--nodes", "99"], "'--nodes': 99 is above the largest value accepted, 50"),
    ],
)
def test_bad_options_are_refused_before_any_work(args: list[str], complaint: str) -> None:
    code, out, err = invoke("tessera", args)
    assert code == 2 and err.startswith("error: ") and complaint in err, out + err
    assert err.count("\n") == 1 and out == ""  # nothing ran: no progress, no output
    assert "Input should be" not in err and "unable to parse" not in err


@pytest.mark.parametrize("args", [["simulate", "-f"], ["queues", "--from-file"], ["nodes", "--from-file"]])
def test_a_yaml_mistake_says_on_which_line(args: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Queue\nmetadata:\n  name: x\n   oops: [1, 2\n")
    code, out, err = invoke("tessera", [*args, str(bad)])
    assert code == 2 and err.count("\n") == 1, out + err
    assert "line 5, column 8" in err and str(bad) in err


def test_a_missing_file_is_the_users_mistake(tmp_path: Path) -> None:
    for args in (["nodes", "--from-file"], ["queues", "--from-file"], ["simulate", "-f"]):
        code, _, err = invoke("tessera", [*args, str(tmp_path / "none.yaml")])
        assert code == 2 and err.startswith("error: ") and "none.yaml" in err, err


def test_report_path_is_checked_before_a_long_run(tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    try:
        if os.access(tmp_path / "ro", os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        code, _, err = invoke("tessera", ["simulate", "--report", str(tmp_path / "ro" / "r.html")])
        assert code == 2 and "not writable" in err
    finally:
        (tmp_path / "ro").chmod(0o700)


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--placement", "fastest"], "--placement: 'fastest' is not one of"),
        (["--cycle-period", "0"], "--cycle-period: must be longer than 0"),
        (["--listen", "everywhere"], "--listen: must be HOST:PORT"),
        (["--log-level", "loud"], "--log-level"),
        (["--webhook-listen", ":9443"], "--webhook-cert-dir"),
    ],
)
def test_scheduler_flags_are_checked_before_it_connects(args: list[str], complaint: str) -> None:
    code, _, err = invoke("tessera-scheduler", [*args, "--kubeconfig", "/nonexistent"])
    assert code == 2 and complaint in err and err.count("\n") == 1


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    return env | {"HOME": str(tmp_path), "COLUMNS": "80"}


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "scheduler.kube.main", "--listen", ""],  # tessera-scheduler
        ["-m", "scheduler.cli.main", "queues"],  # tessera queues
        ["-m", "scheduler.cli.kubectl", "why", "some-pod"],  # kubectl tessera why
    ],
)
def test_no_kubeconfig_is_one_line_not_a_traceback(argv: list[str], tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_clean_env(tmp_path),
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "kubeconfig" in proc.stderr


def test_a_bug_is_one_line_with_a_pointer_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    app = new_app("x")

    @app.command()
    def boom() -> None:
        raise KeyError("surprise")

    @app.command()
    def user() -> None:
        raise CommandError("you must do X", 2)

    @app.command()
    def fails() -> None:
        raise fail("the cluster said no", 1)

    result = runner.invoke(app, ["boom"], prog_name="t")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "KeyError" in result.stderr and "TESSERA_DEBUG=1" in result.stderr
    result = runner.invoke(app, ["user"], prog_name="t")
    assert (result.exit_code, result.stderr) == (2, "error: you must do X\n")
    result = runner.invoke(app, ["fails"], prog_name="t")
    assert (result.exit_code, result.stderr) == (1, "error: the cluster said no\n")
    monkeypatch.setenv("TESSERA_DEBUG", "1")
    result = runner.invoke(app, ["boom"], prog_name="t")
    assert "Traceback" in result.stderr


def test_console_scripts_are_declared() -> None:
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {
        "tessera",
        "kubectl-tessera",
        "tessera-scheduler",
        "tessera-agent",
        "tessera-device-plugin",
    } <= set(scripts)


def test_an_unusable_backend_names_the_option_that_asked_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.state import backend

    monkeypatch.setattr(backend, "cupy_usable", lambda: False)  # as on a machine without CuPy or a GPU
    code, _, err = invoke("tessera", ["bench", "--backend", "cupy", "--nodes", "10", "--pods", "10"])
    assert code == 2 and "--backend cupy: CuPy or a CUDA device is not available" in err, err
    assert "TESSERA_ARRAY_BACKEND" not in err and "tessera[gpu]" in err
    monkeypatch.setenv("TESSERA_ARRAY_BACKEND", "cupy")
    code, _, err = invoke("tessera", ["simulate", "--until", "1s"])
    assert code == 2 and err.startswith("error: TESSERA_ARRAY_BACKEND=cupy: "), err


def test_piped_output_is_not_hard_wrapped_and_an_early_stop_is_said(tmp_path: Path) -> None:
    """`tessera simulate ... | grep` sees each line whole (not cut at 80 columns), and a run that ends
    before --until because nothing is left to happen says so (it used to print "1 s simulated" alone)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    args = [
        "-f",
        str(ROOT / "examples/simulate/kai-cluster.yaml"),
        "-f",
        str(ROOT / "examples/kai"),
        "--until",
        "1m",
    ]
    proc = subprocess.run([sys.executable, "-m", "scheduler.cli.main", "simulate", *args], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    (head,) = [ln for ln in lines if ln.startswith("Tessera simulation")]
    assert head.endswith("placements/s)") and len(head) > 80
    assert any(ln.startswith("Stopped at 1 s: nothing left to happen") for ln in lines)
