#!/usr/bin/env bash
# Twenty-fifth session, call 1: the bounded position stats in two passes over a span (per-lane max, then per-lane
# sums against the span's max: six block reductions a span instead of six a tile; verify_stats.span_bounds)
# against scratch/s25base (git archive 60eb993). Variants of the tree: the second pass's tile BOUND_SUM_BLOCK
# (1024: 96 registers, 5 programs an SM; 512: 78, 6) and the register cap of the bounded launches
# (stochastic.BOUND_MAXNREG: 1024 at 80 = 16 B stack, 6 an SM; 512 at 72 = no stack, 7 an SM). GPU kernel tests.
# The tree of this call was the working tree before ex2.py: 2861f19 with tl.exp for exp_terms and online's
# where(x > -inf) (2861f19 with --set "v:ex2.FTZ=tl.constexpr(False)" differs from it by that where only).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s25/scripts/call1.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call1; mkdir -p $G
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $G/gpu.txt 2>&1
timeout 340 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$" \
  --variant base=scratch/s25base/replay_kernels --variant tree=replay_kernels --variant c80=replay_kernels \
  --variant s512=replay_kernels --variant s512c72=replay_kernels \
  --set "c80:stochastic.BOUND_MAXNREG=80" \
  --set "s512:verify_stats.BOUND_SUM_BLOCK=tl.constexpr(512)" \
  --set "s512c72:verify_stats.BOUND_SUM_BLOCK=tl.constexpr(512)" --set "s512c72:stochastic.BOUND_MAXNREG=72" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||differ|DIFFER|mismatch|Error" $G/ab.txt | head -30; grep "^\*\|=" $G/ab.txt | grep "top-p 0.9 R=64" | head
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -8
