"""The layout docs/architecture.md draws holds in the code: the scheduler's core packages import only the
floors above them (`api` first, `cycle.py` last), never an adapter or a tool, and the node agent and the
device plugin share only `scheduler/api` with the scheduler. Read from the sources (every import, those
inside functions and under TYPE_CHECKING too), so an arrow pointing down fails here, not in a review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The floors of the core, top of docs/architecture.md's list first: each may import those before it.
FLOORS = ("api", "model", "state", "placement", "queues", "cache", "framework", "actions", "cycle")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in `path`."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def _floor(module: str) -> str | None:
    """The scheduler's floor (or other package) a module name is in; None outside `scheduler`."""
    parts = module.split(".")
    return parts[1] if parts[0] == "scheduler" and len(parts) > 1 else None


def _sources(package: str) -> list[Path]:
    base = ROOT / package
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


@pytest.mark.parametrize("floor", FLOORS)
def test_a_core_floor_imports_only_the_floors_above_it(floor: str) -> None:
    allowed = set(FLOORS[: FLOORS.index(floor) + 1])
    wrong = []
    for path in _sources(f"scheduler/{floor}"):
        for line, module in _imports(path):
            target = _floor(module)
            if module.split(".")[0] in ("device_plugin", "node_agent") or (target and target not in allowed):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("component", ["device_plugin", "node_agent"])
def test_the_node_components_share_only_the_api_with_the_scheduler(component: str) -> None:
    other = {"device_plugin": "node_agent", "node_agent": "device_plugin"}[component]
    wrong = []
    for path in _sources(component):
        for line, module in _imports(path):
            top = module.split(".")[0]
            to_scheduler = top == "scheduler" and _floor(module) != "api"
            # The device plugin reads GPUs through the agent's NVML facade, and nothing else of it.
            to_other = top == other and not (
                component == "device_plugin" and module.startswith("node_agent.nvml")
            )
            if to_scheduler or to_other:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)
