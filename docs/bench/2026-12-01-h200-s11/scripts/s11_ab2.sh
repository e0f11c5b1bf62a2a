#!/usr/bin/env bash
# (run on the device; scratch/base = `git archive ce670c5 replay_kernels`; variants other than `tree` were temporary
# edits of the tree, described in docs/BENCHMARKS.md "eleventh session", not committed)
# SCRATCH (eleventh session): later draws in small tiles with exact bounds; per-lane position sums.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 560 python3 tools/ab_kernels.py --kernels --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant rs128=replay_kernels --variant rs256=replay_kernels --variant lane=replay_kernels \
  --set 'rs128:sample_check.ROUND_DRAW_SHAPES=((1 << 31, 128, 1, 4096, True, None, 16),)' \
  --set 'rs256:sample_check.ROUND_DRAW_SHAPES=((1 << 31, 256, 1, 4096, True, None, 8),)' \
  --set 'lane:verify_stats.LANE_SUMS=tl.constexpr(True)' "$@" 2>&1 | tee /tmp/o/ab2.txt
echo "ab rc=${PIPESTATUS[0]}"
cp /tmp/o/ab2.txt $OUT/
