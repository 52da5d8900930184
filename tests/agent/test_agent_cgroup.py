from pathlib import Path

import pytest

from node_agent.cgroup import CgroupResolver, ContainerRef, parse_cgroup

UID = "0c3e4d4a-7d1b-4d4b-9c6e-2b1c8f7e9a11"
SYS_UID = UID.replace("-", "_")
CID = "4e1f0a7b9c2d3e5f60718293a4b5c6d7e8f9012345678901234567890abcdef0"

V1_CGROUPFS_BURSTABLE = f"""12:pids:/kubepods/burstable/pod{UID}/{CID}
11:hugetlb:/kubepods/burstable/pod{UID}/{CID}
10:memory:/kubepods/burstable/pod{UID}/{CID}
9:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}
8:devices:/kubepods/burstable/pod{UID}/{CID}
1:name=systemd:/kubepods/burstable/pod{UID}/{CID}
0::/
"""

V1_SYSTEMD_CONTAINERD = f"""13:rdma:/
12:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYS_UID}.slice/cri-containerd-{CID}.scope
7:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYS_UID}.slice/cri-containerd-{CID}.scope
1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYS_UID}.slice/cri-containerd-{CID}.scope
"""

V2_SYSTEMD_CRIO = (
    f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYS_UID}.slice/crio-{CID}.scope\n"
)
V2_SYSTEMD_GUARANTEED_DOCKER = f"0::/kubepods.slice/kubepods-pod{SYS_UID}.slice/docker-{CID}.scope\n"
V2_CGROUPFS = f"0::/kubepods/besteffort/pod{UID}/{CID}\n"
V2_CGROUPFS_GUARANTEED = f"0::/kubepods/pod{UID}/{CID}\n"
# Seen from inside a container with its own cgroup namespace: the path is relative and climbs out.
V2_NAMESPACED = f"0::/../../kubepods-besteffort-pod{SYS_UID}.slice/cri-containerd-{CID}.scope\n"
# kind / nested kubelet.
V2_KIND = (
    "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
    f"kubelet-kubepods-besteffort-pod{SYS_UID}.slice/cri-containerd-{CID}.scope\n"
)
STATIC_POD_UID = "5a0c4b2e1f3d4c6b8a9e7f6d5c4b3a21"
V1_STATIC_POD = f"4:memory:/kubepods/burstable/pod{STATIC_POD_UID}/{CID}\n"


@pytest.mark.parametrize(
    ("text", "runtime"),
    [
        (V1_CGROUPFS_BURSTABLE, None),
        (V1_SYSTEMD_CONTAINERD, "containerd"),
        (V2_SYSTEMD_CRIO, "cri-o"),
        (V2_SYSTEMD_GUARANTEED_DOCKER, "docker"),
        (V2_CGROUPFS, None),
        (V2_CGROUPFS_GUARANTEED, None),
        (V2_NAMESPACED, "containerd"),
        (V2_KIND, "containerd"),
    ],
)
def test_pod_and_container_found(text: str, runtime: str | None) -> None:
    assert parse_cgroup(text) == ContainerRef(pod_uid=UID, container_id=CID, runtime=runtime)


def test_static_pod_uid_without_dashes() -> None:
    ref = parse_cgroup(V1_STATIC_POD)
    assert ref is not None and ref.pod_uid == STATIC_POD_UID and ref.container_id == CID


def test_crio_conmon_knows_the_pod_not_the_container() -> None:
    ref = parse_cgroup(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYS_UID}.slice/crio-conmon-{CID}.scope\n"
    )
    assert ref == ContainerRef(pod_uid=UID)


@pytest.mark.parametrize(
    "text",
    [
        "0::/init.scope\n",
        "0::/system.slice/containerd.service\n",
        f"0::/system.slice/docker-{CID}.scope\n",  # a plain Docker container, not a pod
        "12:memory:/user.slice/user-1000.slice/session-3.scope\n",
        "",
        "garbage without colons\n\x00\x01",
        "0::/kubepods.slice/kubepods-burstable.slice\n",
    ],
)
def test_not_in_a_pod(text: str) -> None:
    assert parse_cgroup(text) is None


def test_resolver_reads_a_proc_tree(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(V2_SYSTEMD_CRIO)
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text("0::/system.slice/sshd.service\n")
    resolver = CgroupResolver(tmp_path)
    assert resolver.resolve(4242) == ContainerRef(UID, CID, "cri-o")
    assert resolver.resolve(7) is None
    assert resolver.resolve(999) is None  # exited


def test_resolver_on_the_real_proc() -> None:
    # This test process exists; wherever it runs, resolving it must not raise.
    import os

    ref = CgroupResolver().resolve(os.getpid())
    assert ref is None or isinstance(ref, ContainerRef)
