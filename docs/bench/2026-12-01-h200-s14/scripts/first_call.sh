#!/usr/bin/env bash
# Ran unchanged as the fourteenth session's first call (2026-12-01 21:25 UTC), the patch applied; the patch is now in the tree.
# SCRATCH (prepared in the thirteenth session, for the next one's first device call; nothing here has run).
# Before: git apply docs/bench/2026-12-01-h200-s13/scripts/fallback_grid32.patch, and
#   rm -rf scratch/base && mkdir -p scratch/base && git archive HEAD replay_kernels | tar -x -C scratch/base
# Then: run(command="timeout 560 bash docs/bench/2026-12-01-h200-s13/scripts/next_first_call.sh", carry=["scratch", ".peers"])
# 1. CUDA tests (the filter loops stopping at V, the GPU twin of the recorded-maxima test, the fallback patch);
# 2. the launch sequence of verify + top-p and the rows the fallback lists, before (base) and after (tree);
# 3. A/B of the fallback on 32 programs along rows against one a row, every verify case.
# The final bench and checks (s12_final.sh pattern) need a second call: they take about 6 minutes.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests.txt 2>&1; rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/o/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $OUT/next.tgz -C /tmp/o .; exit 1; }
timeout 150 python3 tools/profile_kernels.py --sequence --launches 10 2>&1 | grep -v -i warn > /tmp/o/sequence_tree.txt; echo "sequence rc=$?"
grep -A3 "fallback lists" /tmp/o/sequence_tree.txt
timeout 240 python3 tools/ab_kernels.py --kernels --cases "verify" --variant base=scratch/base/replay_kernels \
  --variant tree=replay_kernels 2>&1 | grep -v -i "warn" | tee /tmp/o/ab_fallback.txt
echo "ab rc=${PIPESTATUS[0]}"
tar czf $OUT/next.tgz -C /tmp/o .
