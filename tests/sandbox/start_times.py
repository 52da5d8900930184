"""The sandboxes' start times ("N real kubelets: ready in X s"), printed at the end of the run.

A plugin of the root conftest (not tests/sandbox/conftest.py): under pytest-xdist the sandboxes start in the
workers, and only the controller, which never loads the sub-folders' conftests, prints the summary. Each
worker hands its lines over in `workeroutput` when it finishes.
"""

from __future__ import annotations

import json

import pytest

START_TIMES: list[str] = []
_KEY = "tessera_sandbox_start_times"


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker
        workeroutput[_KEY] = json.dumps(START_TIMES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """xdist's controller: a worker finished (its lines come with it)."""
    START_TIMES.extend(json.loads(getattr(node, "workeroutput", {}).get(_KEY, "[]")))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if START_TIMES:
        terminalreporter.write_sep("-", "tessera sandbox start times")
        for line in START_TIMES:
            terminalreporter.write_line(line)
