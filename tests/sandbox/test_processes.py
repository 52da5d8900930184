"""The sandbox's process table without an API server: attached processes die with the thread that started
them (so a killed pytest or `bench e2e` leaves no etcd, API server or kubelet behind), detached ones do not
(`tessera sandbox up` returns and they go on)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scheduler.sandbox.processes import ProcessTable, alive, start_ticks
from tests.sandbox.env import wait_for

STARTER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from scheduler.sandbox.processes import ProcessTable
    table = ProcessTable(Path(sys.argv[1]), attached=sys.argv[2] == "attached")
    rec = table.spawn("sleeper", ["sleep", "60"], Path(sys.argv[1]) / "sleeper.log", cwd=Path(sys.argv[1]))
    print(rec.pid, flush=True)
    time.sleep(60)
    """
)


@pytest.mark.parametrize("mode", ["attached", "detached"])
def test_attached_processes_die_with_their_starter_when_it_is_killed(tmp_path: Path, mode: str) -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path), mode], stdout=subprocess.PIPE,
                               text=True, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert starter.stdout is not None
    pid = int(starter.stdout.readline())
    (rec,) = ProcessTable(tmp_path).records()
    assert rec.pid == pid and alive(rec)
    starter.send_signal(signal.SIGKILL)  # no cleanup can run
    starter.wait()
    try:
        if mode == "attached":
            wait_for("the attached process gone", lambda: start_ticks(pid) is None or not alive(rec), 10)
        else:
            assert alive(rec)
    finally:
        ProcessTable(tmp_path).stop_all(timeout_s=2)
    assert not alive(rec)
    assert os.path.exists(tmp_path / "sleeper.log")
