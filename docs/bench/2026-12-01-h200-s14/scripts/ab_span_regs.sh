#!/usr/bin/env bash
# SCRATCH (fourteenth session): search rounds, stats and mass passes from one load of the span held in registers
# The tree it ran = b30b400 with scripts/span_regs.patch applied (rejected; the patch is the record).
# (a reduction over the span a candidate), A/B over 20 steps against b30b400, then the CUDA checks.
# Before: rm -rf scratch/base && mkdir -p scratch/base && git archive b30b400 replay_kernels | tar -x -C scratch/base
# run(command="timeout 580 bash docs/bench/2026-12-01-h200-s14/scripts/ab_span_regs.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT; mkdir -p /tmp/o/checks
timeout 200 python3 tools/ab_kernels.py --steps 20 --cases "verify k=4 top-p,top-k 50" \
  --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant w8=replay_kernels --set "w8:filters.ROUND_WARPS=8" \
  2>&1 | grep -v -i "warn" | tee /tmp/o/ab_span_regs.txt
echo "ab rc=${PIPESTATUS[0]}"
timeout 60 python3 tools/profile_kernels.py --sequence --launches 10 2>&1 | grep -v -i warn > /tmp/o/sequence_span_regs.txt
echo "sequence rc=$?"; awk '/k=4 top_p=0.9/{f=1} f' /tmp/o/sequence_span_regs.txt | grep -E "round|stats|mass|device time" | head -20
timeout 120 python3 -m pytest -q -m gpu tests/test_kernels.py -p no:cacheprovider > /tmp/o/gpu_tests_span_regs.txt 2>&1
echo "gpu tests rc=$?"; tail -2 /tmp/o/gpu_tests_span_regs.txt
OUT=/tmp/o/checks SKIP_KERNEL_TESTS=1 timeout 230 bash tools/run_gpu_checks.sh > /tmp/o/checks/stdout.txt 2>&1; echo "checks rc=$?"
grep -E "exit|unexpected" /tmp/o/checks/stdout.txt | tail -12
tar czf $R/span_regs.tgz -C /tmp/o .
