"""The committed v1beta1 stubs match the .proto, and the wire names are the kubelet's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from device_plugin.v1beta1 import api_pb2

REPO = Path(__file__).resolve().parents[2]
STUBS = ("__init__.py", "api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")
# Version stamps depend on the installed grpcio-tools, not on the .proto: compare everything else exactly.
STAMPS = [
    re.compile(r"^# Protobuf Python Version: .*$", re.M),
    re.compile(r"^GRPC_GENERATED_VERSION = .*$", re.M),
    re.compile(r"_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)", re.S),
]


def _normalised(text: str) -> str:
    for stamp in STAMPS:
        text = stamp.sub("<version>", text)
    return text


def test_committed_stubs_are_regenerated_identically(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(["bash", str(REPO / "scripts/gen_proto.sh"), str(tmp_path)], check=True, env=env)
    for name in STUBS:
        fresh = (tmp_path / "device_plugin/v1beta1" / name).read_text()
        committed = (REPO / "device_plugin/v1beta1" / name).read_text()
        assert _normalised(fresh) == _normalised(committed), f"{name} is stale: run scripts/gen_proto.sh"


def test_generated_grpc_module_imports_as_a_package() -> None:
    text = (REPO / "device_plugin/v1beta1/api_pb2_grpc.py").read_text()
    assert "from device_plugin.v1beta1 import api_pb2" in text
    assert not re.search(r"^import api_pb2", text, re.M)


def test_wire_names_and_field_numbers_match_the_kubelet() -> None:
    pkg = api_pb2.DESCRIPTOR
    assert pkg.package == "v1beta1"
    assert [m.name for m in pkg.services_by_name["DevicePlugin"].methods] == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]
    assert [m.name for m in pkg.services_by_name["Registration"].methods] == ["Register"]

    def fields(message: str) -> dict[str, int]:
        return {f.name: f.number for f in pkg.message_types_by_name[message].fields}

    assert fields("RegisterRequest") == {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}
    assert fields("DevicePluginOptions") == {"pre_start_required": 1, "get_preferred_allocation_available": 2}
    assert fields("Device") == {"ID": 1, "health": 2, "topology": 3}
    assert fields("ContainerPreferredAllocationRequest") == {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    }
    assert fields("ContainerAllocateResponse") == {
        "envs": 1,
        "mounts": 2,
        "devices": 3,
        "annotations": 4,
        "cdi_devices": 5,
    }
    assert fields("Mount") == {"container_path": 1, "host_path": 2, "read_only": 3}
    assert fields("DeviceSpec") == {"container_path": 1, "host_path": 2, "permissions": 3}
    assert fields("NUMANode") == {"ID": 1}
