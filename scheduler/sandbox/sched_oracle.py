"""kube-scheduler's own Filter plugins as an oracle: which nodes would kube-scheduler accept for a pod?

`sched-oracle` (scripts/control_plane/kubernetes/schedoracle, built by scripts/build_control_plane.sh next
to the control plane, from the same Kubernetes release and module pins) runs the default profile's
PreFilter and Filter plugins through kube-scheduler's framework runtime for one pod over a snapshot of
nodes, pods, PersistentVolumes, PersistentVolumeClaims, StorageClasses and Namespaces. It reads one JSON
request per line and answers one line each, so one process serves thousands of cases (`SchedOracle`).

The answer: `feasible` (node names, sorted), `filtered` ({node: {"plugin", "reasons"}}: the first plugin
that rejected each other node) and `preFilter` (a PreFilter plugin that rejected the pod on every node).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from scheduler.sandbox import assets

BINARY = "sched-oracle"
RETRIES = 3
_LAGGING = "could not find v1."


Obj = Mapping[str, Any]


class OracleMissing(RuntimeError):
    """The oracle binary is not built (and could not be)."""


class OracleError(RuntimeError):
    """The oracle could not evaluate a request (its message says why)."""


@dataclass(frozen=True)
class Verdict:
    feasible: tuple[str, ...]
    filtered: dict[str, tuple[str, tuple[str, ...]]] = field(
        default_factory=dict
    )  # node -> (plugin, reasons)
    pre_filter: tuple[str, tuple[str, ...]] | None = None


def find(*, build_if_missing: bool = False) -> Path:
    """The oracle binary: in KUBEBUILDER_ASSETS or the control plane's folder (built there by
    scripts/build_control_plane.sh when asked and Go is installed)."""
    folder = assets.find((BINARY,))
    if folder is None and build_if_missing:
        try:
            folder = assets.build()
        except assets.AssetsMissing as exc:
            raise OracleMissing(str(exc)) from None
    if folder is None or assets.missing(folder, (BINARY,)):
        raise OracleMissing(f"{BINARY} is not built: run scripts/build_control_plane.sh (needs Go)")
    return folder / BINARY


class SchedOracle:
    """One long-lived `sched-oracle` process; `evaluate` sends a snapshot and a pod, returns the verdict."""

    def __init__(self, binary: Path) -> None:
        self.proc = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.cases = 0

    def evaluate(
        self,
        pod: Obj,
        nodes: Sequence[Obj],
        pods: Sequence[Obj] = (),
        *,
        pvs: Sequence[Obj] = (),
        pvcs: Sequence[Obj] = (),
        storage_classes: Sequence[Obj] = (),
        namespaces: Sequence[Obj] = (),
    ) -> Verdict:
        request = {
            "pod": pod, "nodes": list(nodes), "pods": list(pods), "pvs": list(pvs), "pvcs": list(pvcs),
            "storageClasses": list(storage_classes), "namespaces": list(namespaces),
        }  # fmt: skip
        # Every object is in the request: "could not find" can only be a cache the oracle's plugins fill
        # from event handlers, a moment after the informers' stores. Asked again, it has them.
        for _ in range(RETRIES):
            verdict = _verdict(self._ask(request))
            if not any(_LAGGING in r for _, reasons in verdict.filtered.values() for r in reasons):
                break
        return verdict

    def evaluate_sequence(
        self, pods: Sequence[Obj], nodes: Sequence[Obj], *, namespaces: Sequence[Obj] = ()
    ) -> list[Verdict]:
        """Each of `pods` (bound: spec.nodeName) judged against the pods before it, as if scheduled after
        them: one verdict each, in order."""
        request = {"sequence": True, "nodes": list(nodes), "pods": list(pods), "namespaces": list(namespaces)}
        answer = self._ask(request)
        return [_verdict(a) for a in answer.get("sequence") or []]

    def _ask(self, request: Obj) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise OracleError(f"{BINARY} exited (status {self.proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if answer.get("error"):
            raise OracleError(str(answer["error"]))
        self.cases += 1
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> SchedOracle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _verdict(answer: Mapping[str, Any]) -> Verdict:
    pre = answer.get("preFilter")
    return Verdict(
        feasible=tuple(answer.get("feasible") or ()),
        filtered={
            name: (str(v.get("plugin")), tuple(v.get("reasons") or ()))
            for name, v in (answer.get("filtered") or {}).items()
        },
        pre_filter=(str(pre.get("plugin")), tuple(pre.get("reasons") or ())) if pre else None,
    )
