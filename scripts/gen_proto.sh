#!/usr/bin/env bash
# Regenerate the kubelet API stubs from the .proto files in device_plugin/proto/:
#   api.proto          -> device_plugin/v1beta1/      (Device Plugin API v1beta1: Registration, DevicePlugin)
#   podresources.proto -> device_plugin/podresources/ (PodResources API v1: PodResourcesLister)
#
# Usage: scripts/gen_proto.sh [OUTPUT_ROOT]   (default: the repository root)
#        PYTHON=/path/to/python scripts/gen_proto.sh   (an interpreter with grpcio-tools)
#
# protoc names imports after the .proto's path below the include root, so each source is staged as
# device_plugin/<package dir>/api.proto in a scratch include dir: the generated gRPC module then imports
# `from device_plugin.<package dir> import api_pb2` and works as part of the package.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo}"
python="${PYTHON:-python3}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

generate() {  # generate SOURCE_PROTO PACKAGE_DIR DOCSTRING
  local source="$1" dir="$2" doc="$3"
  mkdir -p "$stage/device_plugin/$dir" "$out/device_plugin/$dir"
  cp "$repo/device_plugin/proto/$source" "$stage/device_plugin/$dir/api.proto"
  "$python" -m grpc_tools.protoc -I "$stage" \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
    "device_plugin/$dir/api.proto"
  printf '"""%s"""\n' "$doc" > "$out/device_plugin/$dir/__init__.py"
}

generate api.proto v1beta1 \
  "Generated kubelet Device Plugin API v1beta1 stubs; regenerate with scripts/gen_proto.sh, do not edit."
generate podresources.proto podresources \
  "Generated kubelet PodResources API v1 stubs; regenerate with scripts/gen_proto.sh, do not edit."
