#!/usr/bin/env bash
# Regenerate the kubelet Device Plugin API stubs in device_plugin/v1beta1/ from device_plugin/proto/api.proto.
#
# Usage: scripts/gen_proto.sh [OUTPUT_ROOT]   (default: the repository root)
#        PYTHON=/path/to/python scripts/gen_proto.sh   (an interpreter with grpcio-tools)
#
# protoc names imports after the .proto's path below the include root, so the source is staged as
# device_plugin/v1beta1/api.proto in a scratch include dir: the generated gRPC module then imports
# `from device_plugin.v1beta1 import api_pb2` and works as part of the package.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo}"
python="${PYTHON:-python3}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/device_plugin/v1beta1" "$out/device_plugin/v1beta1"
cp "$repo/device_plugin/proto/api.proto" "$stage/device_plugin/v1beta1/api.proto"

"$python" -m grpc_tools.protoc -I "$stage" \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  device_plugin/v1beta1/api.proto

cat > "$out/device_plugin/v1beta1/__init__.py" <<'PY'
"""Generated kubelet Device Plugin API v1beta1 stubs; regenerate with scripts/gen_proto.sh, do not edit."""
PY
