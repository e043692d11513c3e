#!/usr/bin/env bash
# GFLOP/s per core of the dense layers' products: OpenBLAS, fleetps's backend (oneDNN) fp32 and
# bf16, and PyTorch's matmul on the same shapes, one thread. PyTorch is not a fleetps
# dependency: it is installed here from the Python package registry into a virtual environment
# (FLEETPS_BENCH_VENV, default $BUILD/bench-venv; an existing one with torch is used as it is).
#   bench/gemm_bench/run.sh [batch (default 512)]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${BUILD:-build}"
BATCH="${1:-512}"
VENV="${FLEETPS_BENCH_VENV:-$BUILD/bench-venv}"
lscpu | grep -E "Model name|Vendor ID" || true
"$BUILD/bench/gemm_bench/gemm_bench" --batch "$BATCH"
echo
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch
fi
"$BUILD/bench/gemm_bench/gemm_bench" --batch "$BATCH" --shapes-only | "$VENV/bin/python" bench/gemm_bench/torch_matmul.py
