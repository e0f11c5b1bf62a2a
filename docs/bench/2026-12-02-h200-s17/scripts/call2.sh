#!/usr/bin/env bash
# Seventeenth session, second device call: loading one tile ahead in the verify position stats
# (verify_stats.span_stats) and one tile pair ahead in the check pass (sample_check._span_check), against HEAD
# b1d0320 (scratch/head). Variants: tree (position cap 56: 16 B of stack, was 64; first check cap 80: 72 B of
# stack, was 8), c96 (first check capped at 96: no stack, 5 programs an SM), b512 (512-lane check tiles: 72
# registers, no stack, 7 programs an SM; another order of the check's per-lane sums), p64 (position cap 64: no
# stack, 8 programs an SM). Registers from tools/kernel_resources.py with triton 3.6.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s17/scripts/call2.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c2; mkdir -p $G
timeout 170 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
rc=$?; echo "gpu tests rc=$rc"; tail -3 $G/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $OUT/c2.tgz -C $G .; exit 1; }
timeout 380 python3 tools/ab_kernels.py --kernels --steps 5 --cases "verify,top-p 0.9,SYNTHETIC top-p 0.5" \
  --variant base=scratch/head/replay_kernels --variant tree=replay_kernels \
  --variant c96=replay_kernels --set "c96:sample_check.FIRST_CHECK_MAXNREG=96" \
  --variant b512=replay_kernels --set "b512:sample_check.CHECK_BLOCK=512" \
  --variant p64=replay_kernels --set "p64:stochastic.POSITION_MAXNREG=64" 2>&1 | grep -v -i warn > $G/ab_ahead.txt
echo "ab rc=$?"; grep "^|" $G/ab_ahead.txt
tar czf $OUT/c2.tgz -C $G .
