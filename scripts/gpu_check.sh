#!/usr/bin/env bash
# On a GPU machine: install Tessera with the [gpu] extra (CuPy), run the kernel tests on CuPy, and compare
# the benchmark on numpy and on CuPy at a few cluster sizes (to place TESSERA_CUPY_MIN_GPUS, the `auto`
# backend's crossover). Prints both; finishes in a few minutes. Usage: scripts/gpu_check.sh [venv dir]
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${1:-${TMPDIR:-/tmp}/tessera-gpu-venv}"
PODS="${GPU_CHECK_PODS:-3000}"
SIZES="${GPU_CHECK_NODES:-1000 5000 20000}"

echo "== GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi not found"

echo "== install .[gpu,dev] into $VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q '.[gpu,dev]'
PY="$VENV/bin/python"
"$PY" - <<'PYEOF'
import cupy
print("cupy", cupy.__version__, "devices:", cupy.cuda.runtime.getDeviceCount())
PYEOF

echo "== kernel tests on CuPy (TESSERA_ARRAY_BACKEND=cupy)"
# tests/bench/test_bench_backends.py adds CuPy to its backends under this variable and checks that CuPy
# decides exactly as numpy; the other kernel tests run on numpy and array-api-strict as usual.
TESSERA_ARRAY_BACKEND=cupy timeout 300 "$PY" -m pytest -q -p no:cacheprovider \
  tests/bench/test_bench_backends.py tests/placement/test_kernels.py tests/bench/test_bench_incremental.py

echo "== bench: numpy vs CuPy ($PODS measured pods, binpack)"
declare -A RESULT
for nodes in $SIZES; do
  for backend in numpy cupy; do
    out=$(timeout 240 "$PY" -m scheduler.bench bench --nodes "$nodes" --init-pods "$nodes" --pods "$PODS" \
          --policy binpack --backend "$backend" --output json) || { echo "$nodes $backend: failed"; continue; }
    RESULT[$nodes,$backend]=$("$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["pods_per_s"], d["cycle_latency_ms"]["p50"], d["time_split_pct"]["scoring"])' <<<"$out")
  done
done
printf '%8s %8s | %10s %12s %9s | %10s %12s %9s\n' nodes gpus numpy_pps numpy_p50_ms score_% cupy_pps cupy_p50_ms score_%
for nodes in $SIZES; do
  printf '%8s %8s | %10s %12s %9s | %10s %12s %9s\n' "$nodes" "$((nodes * 8))" \
    ${RESULT[$nodes,numpy]:-- - -} ${RESULT[$nodes,cupy]:-- - -}
done
echo "auto uses CuPy from TESSERA_CUPY_MIN_GPUS GPU slots (default 20000): set it to the smallest size above where CuPy wins."

echo "== bench: fgd on 5000 nodes, numpy vs CuPy ($PODS measured pods)"
for backend in numpy cupy; do
  timeout 240 "$PY" -m scheduler.bench bench --nodes 5000 --pods "$PODS" --policy fgd --backend "$backend" \
    || echo "fgd $backend: failed"
done

echo "== events: 150,000 pod events, 5,000 nodes"
for backend in numpy cupy; do
  timeout 240 "$PY" -m scheduler.bench bench events --nodes 5000 --pods 150000 --backend "$backend" || echo "events $backend: failed"
done
