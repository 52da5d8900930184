"""Root test configuration. Area-specific fixtures live in tests/<area>/conftest.py."""

import os
from typing import Any

import pytest

# Kernels and the cycle must behave the same on every backend; tests pick numpy unless they ask otherwise.
os.environ.setdefault("TESSERA_ARRAY_BACKEND", "numpy")

# Fixtures shared by every area's tests: the real control plane (control_plane, kube_admin, namespace, tessera,
# scene, fault_proxy). Faults come from the proxy in front of the real API server (tests/controlplane/).
# The sandboxes' start times are printed by the controller of an xdist run (tests/sandbox/start_times.py).
pytest_plugins = ["tests.controlplane.fixtures", "tests.sandbox.start_times"]

# The session sandboxes of tests/sandbox/conftest.py that several modules share, and those modules: they run
# in one xdist worker, so each sandbox starts once (checked at collection).
SHARED_SANDBOXES = {
    "sandbox_env": ("tests/sandbox/test_real_kubelet.py", "tests/sandbox/test_sandbox_cli.py",
                    "tests/sandbox/test_user_story.py"),
    "standin_sandbox": ("tests/sandbox/test_examples.py", "tests/sandbox/test_standin.py"),
}  # fmt: skip
_GROUP_OF = {module: fixture for fixture, modules in SHARED_SANDBOXES.items() for module in modules}


# An xdist worker starts with COLUMNS=80 and LINES=24 in its environment, which the CLI's tables honour
# (scheduler/api/cli.py: output_console): the workers get the controller's values (or none) instead.
_TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["tessera_terminal_env"] = {name: os.environ.get(name) for name in _TERMINAL_ENV}


def pytest_configure(config: pytest.Config) -> None:
    values = getattr(config, "workerinput", {}).get("tessera_terminal_env", {})
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# The folders of the longest modules (real kubelets, documented commands run as written, property runs):
# they run first, so that no worker is left alone with one of them at the end.
_LONG_FIRST = ("tests/sandbox/", "tests/docs/", "tests/property/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(_LONG_FIRST))  # stable: same order on every worker
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        for fixture in SHARED_SANDBOXES:
            if fixture in item.fixturenames and _GROUP_OF.get(module) != fixture:
                raise pytest.UsageError(
                    f"{module} uses the session fixture {fixture}: add it to SHARED_SANDBOXES in "
                    "tests/conftest.py (its modules run in one xdist worker, for it to start once)"
                )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist (`-n 2` in pyproject's addopts) sends a whole module to one worker, so module-scoped
    fixtures (a module's own sandbox, scheduler or API server) start once, and the modules of a shared
    session sandbox together. Session fixtures such as the control plane start once per worker; tests
    isolate themselves by namespace. (xdist's own `loadgroup` marks do not survive pytest 9's node ids.)"""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the collection's order (long modules first), not by test count

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return _GROUP_OF.get(module, module)

    return ModuleScheduling(config, log)
