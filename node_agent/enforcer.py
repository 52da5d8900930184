"""The limit watchdog: a pod using more GPU memory than its assigned share is reported, or killed.

Modes: `off`, `report` (a Warning event on the pod and a metric) and `kill` (also SIGKILL to the
pod's processes on that GPU, largest first, until what is left fits the share). It only ever acts on
processes that `/proc/<pid>/cgroup` places in a pod whose assignment it could read: a process outside
a pod, or in a pod without a readable assignment, is never touched.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from node_agent.events import EventSink, LogEvents, PodRef
from node_agent.pods import PodInfo
from scheduler.api import GPUNodeReport, GPUProcess

log = logging.getLogger(__name__)

Mode = Literal["off", "report", "kill"]
MODES: tuple[Mode, ...] = ("off", "report", "kill")
KillFn = Callable[[int, int], None]
# Do not signal the same PID again for this long: NVML may list a dying process for a moment, and a
# PID reused later must not inherit the sentence.
KILL_HOLDOFF_S = 30.0


@dataclass(frozen=True)
class Action:
    kind: Literal["report", "kill"]
    namespace: str
    pod: str
    gpu: int
    pid: int | None = None
    detail: str = ""


class Watchdog:
    def __init__(
        self,
        mode: Mode = "report",
        *,
        events: EventSink | None = None,
        kill: KillFn = os.kill,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown enforcement mode {mode!r}; one of {', '.join(MODES)}")
        self.mode = mode
        self._events = events or LogEvents()
        self._kill = kill
        self._clock = clock
        self._over: set[tuple[str, str, int]] = set()  # (namespace, pod, gpu) currently over its share
        self._killed: dict[int, float] = {}

    def check(
        self,
        report: GPUNodeReport,
        pods: Mapping[str, PodInfo],
        owner_of: Callable[[int], str | None] | None = None,
    ) -> list[Action]:
        """Compare every pod's use with its share on every GPU of the report; act per the mode.

        `owner_of(pid)` re-reads a process's pod UID right before it is signalled, so a PID that exited
        and was reused since the NVML read is never killed in its place.
        """
        if self.mode == "off":
            return []
        by_name = {(p.namespace, p.name): p for p in pods.values() if p.assignment is not None}
        actions: list[Action] = []
        still_over: set[tuple[str, str, int]] = set()
        for gpu in report.spec.gpus:
            for share in gpu.shares:
                key = (share.namespace, share.pod, gpu.index)
                pod = by_name.get((share.namespace, share.pod))
                if not share.over_limit or pod is None:
                    continue
                still_over.add(key)
                ref = PodRef(pod.namespace, pod.name, pod.uid)
                if key not in self._over:
                    detail = (
                        f"uses {share.memory_used_mib} MiB on GPU {gpu.index} ({gpu.uuid}), "
                        f"over its share of {share.memory_limit_mib} MiB ({share.milli} milli)"
                    )
                    self._events.emit(ref, "GPUMemoryOverLimit", f"pod {detail}")
                    actions.append(Action("report", pod.namespace, pod.name, gpu.index, detail=detail))
                if self.mode == "kill":
                    mine = [p for p in gpu.processes if p.pod_uid == pod.uid]
                    actions += self._kill_until_fits(ref, gpu.index, mine, share.memory_limit_mib, owner_of)
        self._over = still_over
        return actions

    def _kill_until_fits(
        self,
        pod: PodRef,
        gpu: int,
        processes: list[GPUProcess],
        limit_mib: int,
        owner_of: Callable[[int], str | None] | None,
    ) -> list[Action]:
        now = self._clock()
        self._killed = {pid: t for pid, t in self._killed.items() if now - t < KILL_HOLDOFF_S}
        remaining = sum(p.used_mib for p in processes)
        actions: list[Action] = []
        for proc in sorted(processes, key=lambda p: (-p.used_mib, p.pid)):
            if remaining <= limit_mib:
                break
            remaining -= proc.used_mib
            if proc.pid in self._killed:
                continue  # already signalled; its memory is on its way out
            if owner_of is not None and owner_of(proc.pid) != pod.uid:
                log.warning(
                    "PID %d no longer belongs to pod %s/%s: not killed", proc.pid, pod.namespace, pod.name
                )
                continue
            try:
                self._kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                continue  # exited by itself
            except OSError as exc:
                log.warning("cannot kill PID %d of pod %s/%s: %s", proc.pid, pod.namespace, pod.name, exc)
                continue
            self._killed[proc.pid] = now
            detail = (
                f"killed PID {proc.pid} ({proc.used_mib} MiB on GPU {gpu}) "
                f"to bring the pod within {limit_mib} MiB"
            )
            self._events.emit(pod, "GPUProcessKilled", detail)
            actions.append(Action("kill", pod.namespace, pod.name, gpu, pid=proc.pid, detail=detail))
        return actions
