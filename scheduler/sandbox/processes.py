"""The sandbox's processes: started in their own session (so `tessera sandbox up` can return and a Ctrl-C
in the shell does not reach them), recorded in `<data dir>/processes.json` as each one starts (so `down`
finds them even after a failed `up`), and stopped by pid with a check of the process's start time (a pid
the kernel has since given to another process is left alone).

`tessera sandbox up` detaches them on purpose. A test or a benchmark that starts them itself attaches
them instead (`die_with_parent`): the kernel kills each one when the thread that started it dies, so a
killed pytest or `bench e2e` leaves no etcd, API server or kubelet behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, TypeAdapter

TABLE = "processes.json"


class ProcessRecord(BaseModel):
    name: str
    pid: int
    started: int  # start time in clock ticks since boot (/proc/<pid>/stat field 22)
    argv: list[str]
    log: str
    # Stopped in waves, highest tier first: the components while the API server can still answer their
    # last calls (releasing the leader Lease...), then the controllers, the API server, and etcd last (an
    # API server that loses etcd while shutting down takes its full timeout).
    tier: int = 3
    cwd: str = ""  # where it was started (a restart starts it there again)


_Records = TypeAdapter(list[ProcessRecord])
# Children started by this process, kept so that the ones that exit are reaped (no zombies while a test
# session or a failed `up` is still running); a later `tessera sandbox down` runs in another process.
_children: dict[int, subprocess.Popen[bytes]] = {}
_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A `preexec_fn`: the kernel sends the child SIGKILL when the thread that started it dies (prctl
    PR_SET_PDEATHSIG; kept across exec). If that thread died already, the child exits at once."""
    parent = os.getppid()
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent == 1:
        os._exit(1)


def start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None when no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after its closing ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def alive(rec: ProcessRecord) -> bool:
    child = _children.get(rec.pid)
    if child is not None and child.poll() is not None:
        return False  # it exited (and is reaped now)
    if start_ticks(rec.pid) != rec.started:
        return False
    try:
        state = Path(f"/proc/{rec.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; only its parent has not collected it yet


class ProcessTable:
    def __init__(self, data_dir: Path, *, attached: bool = False) -> None:
        self.path = data_dir / TABLE
        self.attached = attached  # die with the thread that started them (tests, benchmarks)

    def records(self) -> list[ProcessRecord]:
        try:
            return _Records.validate_json(self.path.read_bytes())
        except (OSError, ValueError):
            return []

    def _write(self, records: list[ProcessRecord]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(_Records.dump_json(records, indent=2))
        tmp.replace(self.path)

    def add(
        self, name: str, pid: int, argv: Sequence[str], log: Path, *, tier: int = 3, cwd: Path | None = None
    ) -> ProcessRecord:
        rec = ProcessRecord(
            name=name,
            pid=pid,
            started=start_ticks(pid) or 0,
            argv=list(argv),
            log=str(log),
            tier=tier,
            cwd=str(cwd or ""),
        )
        self._write([*(r for r in self.records() if r.name != name), rec])
        return rec

    def get(self, name: str) -> ProcessRecord | None:
        return next((r for r in self.records() if r.name == name), None)

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path,
        tier: int = 3,
    ) -> ProcessRecord:
        """Start `argv` in its own session, output appended to `log`, and record it (replacing a record
        of the same name)."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=cwd,
                env={**os.environ, **(env or {})},
                preexec_fn=die_with_parent if self.attached else None,
            )
        _children[proc.pid] = proc
        return self.add(name, proc.pid, argv, log, tier=tier, cwd=cwd)

    def stop(self, name: str, timeout_s: float = 10.0) -> ProcessRecord | None:
        """Stop one recorded process (TERM its group, KILL after `timeout_s`); its record, None if unknown."""
        rec = self.get(name)
        if rec is not None and alive(rec):
            _stop([rec], timeout_s)
        return rec

    def restart(self, name: str, timeout_s: float = 10.0) -> ProcessRecord:
        """Stop the recorded process and start it again with the same command line, folder and log."""
        rec = self.stop(name, timeout_s)
        if rec is None:
            raise KeyError(name)
        with Path(rec.log).open("ab") as out:
            out.write(f"\n==== restarted by the sandbox at {time.strftime('%H:%M:%S')} ====\n".encode())
        return self.spawn(name, rec.argv, Path(rec.log), cwd=Path(rec.cwd or "."), tier=rec.tier)

    def stop_all(self, timeout_s: float = 10.0) -> list[str]:
        """Stop every live recorded process: TERM each tier's process groups (highest tier first), KILL
        what is left of a tier after `timeout_s`; returns the names of the processes that were running."""
        records = [r for r in reversed(self.records()) if alive(r)]
        for tier in sorted({r.tier for r in records}, reverse=True):
            _stop([r for r in records if r.tier == tier], timeout_s)
        return [r.name for r in records]


def _stop(records: list[ProcessRecord], timeout_s: float) -> None:
    for rec in records:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(rec.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(alive(r) for r in records) and time.monotonic() < deadline:
        time.sleep(0.05)
    for rec in records:
        if alive(rec):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(rec.pid, signal.SIGKILL)
