"""Tessera's components as the chart runs them, turned into local command lines.

The scheduler's Deployment and the node DaemonSet of the rendered chart give each container's command,
arguments and ServiceAccount; the sandbox runs those same command lines as processes, changing only what
a pod has and a laptop has not: listen addresses (loopback, free ports), host paths (the node's
device-plugin folder, `/proc`), the downward-API variables (`$(NODE_NAME)`...), and credentials (a
kubeconfig holding the ServiceAccount's token instead of the mounted one). So a flag the chart passes
wrongly fails here too.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.sandbox.manifests import workload

# The chart's pods.
SCHEDULER = ("Deployment", "tessera-scheduler")
AGENT = ("DaemonSet", "tessera-agent")
DEVICE_PLUGIN = ("DaemonSet", "tessera-device-plugin")
# Console script -> its module, for when the scripts are not next to this interpreter.
MODULES = {
    "tessera-scheduler": "scheduler.kube.main",
    "tessera-agent": "node_agent",
    "tessera-device-plugin": "device_plugin",
}
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass(frozen=True)
class PodTemplate:
    namespace: str
    service_account: str
    containers: dict[str, dict[str, Any]]  # by container name


def pod_template(kind: str, name: str, *, kai_compat: bool = False) -> PodTemplate:
    obj = workload(kind, name, kai_compat=kai_compat)
    spec = obj["spec"]["template"]["spec"]
    return PodTemplate(
        namespace=str(obj["metadata"].get("namespace", "default")),
        service_account=str(spec.get("serviceAccountName", "default")),
        containers={c["name"]: c for c in spec.get("containers") or []},
    )


def executable(command: str) -> list[str]:
    """The console script installed next to this interpreter, else `python -m <its module>`."""
    script = Path(sys.executable).parent / command
    if script.exists():
        return [str(script)]
    found = shutil.which(command)
    if found and command not in MODULES:
        return [found]
    return [sys.executable, "-m", MODULES[command]]


def executable_module(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def command_line(
    container: Mapping[str, Any],
    *,
    env: Mapping[str, str],
    overrides: Mapping[str, str],
    extra: Sequence[str] = (),
) -> list[str]:
    """The container's command and args with `$(VAR)` expanded from `env`, `--flag=value` replaced for
    each flag in `overrides`, and `extra` appended."""
    command = list(container.get("command") or [])
    if not command:
        raise ValueError(f"container {container.get('name')} of the chart has no command")
    args: list[str] = []
    for raw in container.get("args") or []:
        arg = _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), str(raw))
        flag = arg.split("=", 1)[0]
        args.append(f"{flag}={overrides[flag]}" if flag in overrides and "=" in arg else arg)
    return [*executable(command[0]), *command[1:], *args, *extra]
