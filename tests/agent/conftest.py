"""A fake GPU node for the agent's tests: FakeNVML, a temp /proc with real-shaped cgroup files, pods."""

from __future__ import annotations

import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from node_agent.agent import Agent
from node_agent.cgroup import CgroupResolver
from node_agent.nvml.fake import FakeNVML
from node_agent.pods import PodInfo, StaticPods, pod_info
from scheduler.api import AssignedGPU, GPUAssignment
from scheduler.api.keys import GPU_ASSIGNMENT

NODE = "gpu-node-1"


class Scene:
    def __init__(self, tmp_path: Path, spec: str = "2xA100-40GB") -> None:
        self.proc_root = tmp_path / "proc"
        self.proc_root.mkdir()
        self.nvml = FakeNVML(spec, seed=NODE)
        self.pods = StaticPods()
        self._pods: list[PodInfo] = []
        self._containers: dict[str, dict[str, str]] = {}

    def pod_dict(
        self,
        name: str,
        gpus: list[tuple[int, int, int]] | None = None,
        *,
        namespace: str = "team-a",
        annotation: str | None = None,
        uid: str | None = None,
    ) -> dict[str, Any]:
        """A pod as the API returns it; `gpus` = [(index, milli, memoryMiB)] becomes its assignment."""
        uid = uid or str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{namespace}/{name}"))
        annotations: dict[str, str] = {}
        if gpus is not None:
            devices = self.nvml.devices()
            assignment = GPUAssignment(
                node=NODE,
                gpus=[
                    AssignedGPU(index=i, uuid=devices[i].uuid, milli=m, memory_mib=mib) for i, m, mib in gpus
                ],
            )
            annotations[GPU_ASSIGNMENT] = assignment.to_annotation()
        if annotation is not None:
            annotations[GPU_ASSIGNMENT] = annotation
        cid = uuidlib.uuid5(uuidlib.NAMESPACE_URL, uid).hex * 2
        return {
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations},
            "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
            "status": {"containerStatuses": [{"name": "main", "containerID": f"containerd://{cid}"}]},
        }

    def add_pod(self, name: str, gpus: list[tuple[int, int, int]] | None = None, **kw: Any) -> PodInfo:
        pod = pod_info(self.pod_dict(name, gpus, **kw))
        self._pods.append(pod)
        self.pods.set(self._pods)
        return pod

    def run_process(self, pod: PodInfo | None, gpu: int, pid: int, used_mib: int) -> None:
        """A process on `gpu`; in `pod` (systemd driver, containerd) or, with None, on the host."""
        (self.proc_root / str(pid)).mkdir(exist_ok=True)
        if pod is None:
            line = "0::/system.slice/some-daemon.service\n"
        else:
            cid = next(iter(pod.containers))
            line = (
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                f"{pod.uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n"
            )
        (self.proc_root / str(pid) / "cgroup").write_text(line)
        self.nvml.add_process(gpu, pid, used_mib)

    def agent(self, **kw: Any) -> Agent:
        return Agent(NODE, self.nvml, pods=self.pods, resolver=CgroupResolver(self.proc_root), **kw)


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    return Scene(tmp_path)
