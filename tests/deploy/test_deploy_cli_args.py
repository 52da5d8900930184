"""Every command line the chart gives a Tessera container must parse with that component's real CLI.

An unknown flag would crash the container at start; this catches chart/CLI drift without a cluster.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _entry_points() -> dict[str, str]:
    scripts: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return scripts


def _command_for(script: str) -> Any:
    module_name = _entry_points()[script].split(":", 1)[0]
    module = importlib.import_module(module_name)
    apps = [v for v in vars(module).values() if isinstance(v, typer.Typer)]
    assert len(apps) == 1, f"{module_name} should define exactly one typer app"
    return typer.main.get_command(apps[0])


def _containers() -> list[tuple[str, str, list[str]]]:
    out = []
    for doc in yaml.safe_load_all((ROOT / "deploy" / "manifests" / "tessera.yaml").read_text()):
        spec: dict[str, Any] = ((doc or {}).get("spec") or {}).get("template", {}).get("spec", {})
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            cmd = c.get("command") or []
            if cmd and cmd[0].startswith("tessera"):
                out.append(
                    (
                        f"{doc['kind']}/{doc['metadata']['name']}/{c['name']}",
                        cmd[0],
                        [*cmd[1:], *c.get("args", [])],
                    )
                )
    return out


CONTAINERS = _containers()
# typer vendors click: its UsageError (base of every bad-command-line error) is BadParameter's parent.
USAGE_ERROR: type[Exception] = typer.BadParameter.__mro__[1]


def test_chart_runs_every_component():
    assert {script for _, script, _ in CONTAINERS} == {
        "tessera-scheduler",
        "tessera-agent",
        "tessera-device-plugin",
    }


@pytest.mark.parametrize(("where", "script", "args"), CONTAINERS, ids=[c[0] for c in CONTAINERS])
def test_container_args_parse(where: str, script: str, args: list[str]) -> None:
    assert script in _entry_points(), f"{where}: {script} is not a console script"
    command = _command_for(script)
    # Kubernetes expands $(VAR) from the container's env; any value is fine for parsing.
    expanded = [re.sub(r"\$\((\w+)\)", "value", a) for a in args]
    try:
        command.make_context(script, expanded)
    except USAGE_ERROR as exc:
        pytest.fail(f"{where}: `{script} {' '.join(args)}` is rejected: {exc}")
