"""Pod status as the kubelet writes it, for the stand-in's fake containers (none really runs).

Shapes follow the kubelet's status manager: Running with a `containerStatuses` entry per container and
the Ready conditions; terminated containers with exit code, reason and times, and the pod's terminal phase
(Succeeded when every container exited 0, else Failed); a refused pod is Failed with the admission reason.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
RUNTIME = "sandbox"  # container IDs read `sandbox://<id>`: no container runtime behind them


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _containers(pod: Obj) -> list[Obj]:
    return list((pod.get("spec") or {}).get("containers") or [])


def _conditions(ready: bool, when: str) -> list[Obj]:
    status = "True" if ready else "False"
    reason = {} if ready else {"reason": "PodCompleted"}
    return [
        {"type": "PodReadyToStartContainers", "status": status, "lastTransitionTime": when},
        {"type": "Initialized", "status": "True", "lastTransitionTime": when, **reason},
        {"type": "Ready", "status": status, "lastTransitionTime": when, **reason},
        {"type": "ContainersReady", "status": status, "lastTransitionTime": when, **reason},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": when},
    ]


def _container_id(pod: Obj, name: str) -> str:
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    return f"{RUNTIME}://{uid[:8]}-{name}"


def running(pod: Obj, *, started: str, host_ip: str, pod_ip: str) -> Obj:
    statuses = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": f"{RUNTIME}://{c.get('image', '')}",
            "containerID": _container_id(pod, c["name"]),
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": started}},
        }
        for c in _containers(pod)
    ]
    return {
        "phase": "Running",
        "conditions": _conditions(True, started),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": started,
        "containerStatuses": statuses,
    }


def terminated(pod: Obj, *, started: str, exit_code: int, reason: str, message: str = "") -> Obj:
    finished = now_rfc3339()
    term: Obj = {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": finished}
    if message:
        term["message"] = message
    statuses = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": f"{RUNTIME}://{c.get('image', '')}",
            "containerID": _container_id(pod, c["name"]),
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {"terminated": term},
        }
        for c in _containers(pod)
    ]
    return {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "conditions": _conditions(False, finished),
        "containerStatuses": statuses,
    }


def rejected(reason: str, message: str) -> Obj:
    """Admission refused (e.g. `UnexpectedAdmissionError` when Allocate failed): the pod is Failed, with
    the kubelet's "Pod was rejected: " before the message (the event has the message alone)."""
    return {"phase": "Failed", "reason": reason, "message": f"Pod was rejected: {message}"}
