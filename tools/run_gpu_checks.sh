#!/usr/bin/env bash
# GPU correctness checks and verify/run timings on the lent H200, from the repo root, in one call:
#   run(command="bash tools/run_gpu_checks.sh", timeout_s=600)
# The Triton kernel tests, the public entry points captured in a CUDA graph and the bench clock (-m gpu), `replay run` of every committed fixture through `stochastic` on CUDA,
# the founding-case routing violation, `replay verify` wall-clock on CUDA, and a bench of the real
# draft-model fixture (V = 151,936 with draft logits). Output: $OUT/log.txt; each command is printed
# with its exit code and the one expected. SKIP_IMPL_TESTS=1 skips tests/test_impls.py (about 45 s),
# SKIP_KERNEL_TESTS=1 the kernel tests (run by tools/run_gpu_bench.sh too).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu_checks_out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
FAILS=0
check() {  # check EXPECTED_EXIT CMD...: run, time, compare the exit code
  local want=$1; shift
  echo; echo "==== \$ $*"
  local t0; t0=$(date +%s.%N)
  "$@"; local rc=$?
  local dt; dt=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  if [ "$rc" = "$want" ]; then echo "==== exit $rc (expected $want) OK, ${dt} s wall"
  else echo "==== exit $rc (expected $want) UNEXPECTED, ${dt} s wall"; FAILS=$((FAILS + 1)); fi
}
replay() { python3 -m replay_harness.cli "$@"; }
{
  echo "== $(date -u +%FT%TZ) $(hostname)"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "gpu", torch.cuda.get_device_name(0))'
  if python3 -c 'import pytest' 2>/dev/null; then
    [ -n "${SKIP_KERNEL_TESTS:-}" ] || check 0 timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels.py tests/test_kernels_api.py tests/test_bench.py
    [ -n "${SKIP_IMPL_TESTS:-}" ] || check 0 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_impls.py
  else echo "== pytest missing: GPU kernel tests skipped"; fi
  check 0 replay run fixtures/*/ replay_harness/conformance/vectors/ --impl stochastic --against reference --device cuda
  check 1 replay run fixtures/real-founding --impl greedy-only --against stochastic --device cuda
  check 0 replay verify --impl stochastic --device cuda
  check 0 replay verify fixtures/real-founding fixtures/real-mixed fixtures/real-topk-topp --impl stochastic --device cuda
  check 0 replay verify fixtures/real-draft-logits fixtures/real-draft-model --impl stochastic --device cuda
  check 1 replay verify fixtures/real-founding --impl greedy-only --device cuda
  check 0 replay bench fixtures/real-draft-model fixtures/real-draft-logits --impl greedy-only --vs stochastic --repeats 30
  echo; echo "== done: $FAILS unexpected exit code(s)"
} 2>&1 | tee "$OUT/log.txt"
