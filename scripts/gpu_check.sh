#!/usr/bin/env bash
# Heterogeneous CPU+CUDA check of the TVM bridge (needs a CUDA GPU; pass
# --dry-run to map cuda to a second CPU device on a machine without one).
# One line per model: devices, max abs error vs the CPU-only build, timings.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
if [ "${1:-}" != "--dry-run" ] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
  # Compile for the GPU that is here unless the caller chose an arch.
  if [ -z "${DEVPLAN_CUDA_ARCH:-}" ]; then
    cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
    [ -n "$cap" ] && export DEVPLAN_CUDA_ARCH="sm_${cap}"
  fi
fi
# TVM 0.27 compiles CUDA with NVRTC through cuda-bindings when present, else use nvcc.
if ! "$PY" -c "import cuda.bindings" 2>/dev/null; then
  export TVM_CUDA_COMPILE_MODE="${TVM_CUDA_COMPILE_MODE:-nvcc}"
fi
exec "$PY" scripts/gpu_check.py "$@"
