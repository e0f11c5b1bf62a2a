#!/usr/bin/env bash
# PREPARED in the fifteenth session for the next one's first device call; nothing here has run.
# Before: git apply docs/bench/2026-12-02-h200-s15/scripts/finish_prune.patch, and
#   rm -rf scratch/base && mkdir -p scratch/base && git archive HEAD replay_kernels | tar -x -C scratch/base
# Then: run(command="timeout 580 bash docs/bench/2026-12-02-h200-s15/scripts/next_first_call.sh", carry=["scratch", ".peers"])
# The patch prunes the finish loop's draw (sample_check._row_draw) with the draw kernel's noise bound: a tile pays
# for the logs only if some x + gumbel_upper_bound(h) reaches the best score so far. The r0 variants launch no
# round, so the finish loop does every row the first check leaves open: they time the loop itself (about 590 us a
# row at V = 248,320 before; fifteenth session, docs/BENCHMARKS.md).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > /tmp/o/gpu_tests.txt 2>&1
rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/o/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $OUT/next.tgz -C /tmp/o .; exit 1; }
timeout 300 python3 tools/ab_kernels.py --kernels --steps 12 --cases "top-p 0.9 R=1,top-p 0.5 R=1,top-p 0.9 R=8" \
  --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant base_r0=scratch/base/replay_kernels --set "base_r0:sample_check.EXTRA_ROUNDS=0" \
  --variant tree_r0=replay_kernels --set "tree_r0:sample_check.EXTRA_ROUNDS=0" \
  2>&1 | grep -v -i warn > /tmp/o/ab_finish_prune.txt
echo "ab rc=$?"; grep "^|" /tmp/o/ab_finish_prune.txt; grep "_finish_kernel [0-9][0-9]" /tmp/o/ab_finish_prune.txt | cut -c1-200
tar czf $OUT/next.tgz -C /tmp/o .
