"""Time-based fair share in the chart: its values become the scheduler's flags (which its real CLI
parses into the same parameters), and its RBAC is exactly the one ConfigMap the history lives in."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import typer

from scheduler.kube import main as scheduler_main
from scheduler.queues.usage_history import UsageParams
from tests.deploy.deploy_support import Manifest, find, one

VALUES = {"scheduler": {"timeBasedFairShare": {
    "enabled": True, "windowSize": "3d", "halfLifePeriod": "12h", "kValue": 0.5, "resolution": "30m",
    "configMapName": "usage-history"}}}  # fmt: skip


def scheduler_args(objects: list[Manifest]) -> list[str]:
    deployment = one(objects, "Deployment", "tessera-scheduler")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return [re.sub(r"\$\((\w+)\)", "tessera-system", a) for a in container["args"]]


def test_values_become_flags_the_scheduler_reads(render: Callable[..., list[Manifest]]) -> None:
    args = scheduler_args(render(VALUES))
    flags = dict(a.removeprefix("--").split("=", 1) for a in args if a.startswith("--usage"))
    assert flags == {"usage-window": "3d", "usage-half-life": "12h", "usage-k-value": "0.5",
                     "usage-resolution": "30m", "usage-configmap": "usage-history",
                     "usage-namespace": "tessera-system"}  # fmt: skip
    command = typer.main.get_command(scheduler_main.app)
    ctx = command.make_context("tessera-scheduler", args)
    p = ctx.params
    got = scheduler_main.usage_params(
        p["usage_window"], p["usage_half_life"], p["usage_k_value"], p["usage_resolution"]
    )
    assert got == UsageParams(window_s=3 * 86400, half_life_s=12 * 3600, k_value=0.5, resolution_s=1800)


def test_off_by_default_with_no_flag_and_no_role(default_objects: list[Manifest]) -> None:
    assert not [a for a in scheduler_args(default_objects) if a.startswith("--usage")]
    assert not [r for r in find(default_objects, "Role") if "usage" in r["metadata"]["name"]]


def test_the_role_names_only_the_history_configmap(render: Callable[..., list[Manifest]]) -> None:
    objects = render(VALUES)
    role = one(objects, "Role", "tessera-scheduler-usage-history")
    rules: list[dict[str, Any]] = role["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["usage-history"],
            "verbs": ["get", "update"],
        },
    ]
    binding = one(objects, "RoleBinding", "tessera-scheduler-usage-history")
    assert binding["subjects"][0]["name"] == "tessera-scheduler"


@pytest.mark.parametrize(("flags", "message"), [
    (["--usage-half-life=1h"], "needs --usage-window"),
    (["--usage-window=7d", "--usage-k-value=-1"], "kValue must be"),
    (["--usage-window=0s"], "longer than 0"),
])  # fmt: skip
def test_bad_flags_are_one_line_errors(flags: list[str], message: str) -> None:
    command = typer.main.get_command(scheduler_main.app)
    p = command.make_context("tessera-scheduler", flags).params
    with pytest.raises(typer.BadParameter, match=message):
        scheduler_main.usage_params(
            p["usage_window"], p["usage_half_life"], p["usage_k_value"], p["usage_resolution"]
        )
