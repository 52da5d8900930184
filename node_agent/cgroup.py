"""Map a host PID to its pod and container through `/proc/<pid>/cgroup`.

The kubelet puts every container in a cgroup whose path names the pod UID and the container ID. The
shapes differ by cgroup version (v1 lines `ID:controllers:path`, v2 line `0::path`), by cgroup driver
(cgroupfs: `/kubepods/burstable/pod<uid>/<id>`; systemd: `.../kubepods-burstable-pod<uid_with_underscores>
.slice/cri-containerd-<id>.scope`) and by runtime (containerd `cri-containerd-`, CRI-O `crio-`, Docker
`docker-`). Paths may also be relative to the agent's own cgroup namespace (`/../..`), so the pod is
found by the shape of its path segment wherever it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# A pod UID: a UUID (dashes, or underscores under the systemd driver) or, for static pods, 32 hex digits.
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
# `pod<uid>` (cgroupfs) or `...-pod<uid>.slice` (systemd, also kind's `kubelet-kubepods-...`).
_POD_SEGMENT = re.compile(rf"^(?:[a-z0-9_.-]*kubepods[a-z0-9_-]*-)?pod(?P<uid>{_UID})(?:\.slice)?$")
# The container segment: a bare ID (cgroupfs) or `<runtime>-<id>.scope` (systemd).
_CONTAINER_SEGMENT = re.compile(
    r"^(?:(?P<prefix>cri-containerd|crio|docker|containerd)-)?(?P<id>[0-9a-f]{12,64})(?:\.scope)?$"
)
_RUNTIMES = {"cri-containerd": "containerd", "containerd": "containerd", "crio": "cri-o", "docker": "docker"}
# Controllers whose hierarchy always holds the kubelet's pod cgroups under cgroup v1.
_V1_PREFERRED = ("memory", "pids", "cpu", "cpuacct", "cpu,cpuacct", "devices")


@dataclass(frozen=True)
class ContainerRef:
    """Where a process lives: its pod's UID (with dashes) and, when known, its container ID."""

    pod_uid: str
    container_id: str | None = None
    runtime: str | None = None


def _parse_path(path: str) -> ContainerRef | None:
    segments = [s for s in path.split("/") if s and s != ".."]
    for i, segment in enumerate(segments):
        pod = _POD_SEGMENT.match(segment)
        if pod is None:
            continue
        uid = pod["uid"].replace("_", "-")
        if i + 1 < len(segments):
            container = _CONTAINER_SEGMENT.match(segments[i + 1])
            if container is not None:
                runtime = _RUNTIMES.get(container["prefix"] or "")
                return ContainerRef(pod_uid=uid, container_id=container["id"], runtime=runtime)
        # The pod's own cgroup or a runtime helper (CRI-O's conmon): the pod is known, the container not.
        return ContainerRef(pod_uid=uid)
    return None


def parse_cgroup(text: str) -> ContainerRef | None:
    """Find the pod (and container) in the contents of a `/proc/<pid>/cgroup` file; None if not in a pod."""
    candidates: list[tuple[int, ContainerRef]] = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        ref = _parse_path(path)
        if ref is None:
            continue
        # Prefer the unified (v2) line, then the v1 controllers that always mirror the pod layout.
        if hierarchy == "0" and controllers == "":
            rank = 0
        elif controllers in _V1_PREFERRED or controllers.split(",")[0] in _V1_PREFERRED:
            rank = 1
        else:
            rank = 2
        candidates.append((rank if ref.container_id else rank + 3, ref))
    if not candidates:
        return None
    return min(candidates, key=lambda c: c[0])[1]


class CgroupResolver:
    """Reads `/proc/<pid>/cgroup` under a configurable proc root (tests point it at a temp directory)."""

    def __init__(self, proc_root: Path | str = "/proc") -> None:
        self.proc_root = Path(proc_root)

    def resolve(self, pid: int) -> ContainerRef | None:
        """The pod of `pid`, or None when the process is gone, unreadable or not in a pod."""
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text(errors="replace")
        except OSError:
            return None
        return parse_cgroup(text)
