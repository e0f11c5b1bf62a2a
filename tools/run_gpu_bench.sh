#!/usr/bin/env bash
# One command for the lent H200 (repo root, `.peers` carried): install the peers, run the GPU kernel
# tests if pytest is there, then build/check/time everything with tools/bench_kernels.py.
#   run(command="bash tools/run_gpu_bench.sh", carry=[".peers"], timeout_s=600)
# Extra arguments go to bench_kernels.py (e.g. --vocab 248320 --cases verify).
# Output: $OUT/log.txt (everything), $OUT/bench.{md,csv,json}; the headline table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/bench_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  echo "== $(date -u +%FT%TZ) $(hostname) repo $(pwd)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,utilization.gpu,memory.used --format=csv 2>&1 || true
  echo "== install peers into /tmp/site"
  rm -rf /tmp/site
  if compgen -G ".peers/wheels/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl || echo "WARN: FlashInfer wheel install failed (the bench skips the peer)"
  else
    echo "WARN: no .peers/wheels (was .peers carried?)"
  fi
  export PYTHONPATH="/tmp/site:$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
  if ! python3 -c 'from typing_extensions import get_annotations' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/opt/*.whl || echo "WARN: typing-extensions fallback failed"
  fi
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "gpu", torch.cuda.get_device_name(0))'
  if [ -f tests/test_kernels.py ] && python3 -c 'import pytest' 2>/dev/null; then
    echo "== pytest -m gpu tests/test_kernels.py tests/test_sample_check.py (max 200 s)"
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels.py tests/test_sample_check.py
    echo "== pytest rc=$? (not fatal; the bench runs anyway)"
  else
    echo "== pytest or tests/test_kernels.py missing: GPU tests skipped"
  fi
  echo "== bench"
  python3 tools/bench_kernels.py --out "$OUT" "$@"
} 2>&1 | tee "$OUT/log.txt"
