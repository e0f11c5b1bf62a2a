#!/usr/bin/env bash
# SCRATCH (fourteenth session): the search rounds' span pre-test and per-lane accumulators, A/B over 20 steps.
# Before: rm -rf scratch/base && mkdir -p scratch/base && git archive eb59159 replay_kernels | tar -x -C scratch/base
# run(command="timeout 560 bash docs/bench/2026-12-01-h200-s14/scripts/ab_rounds.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 170 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests_rounds.txt 2>&1
echo "gpu tests rc=$?"; tail -3 /tmp/o/gpu_tests_rounds.txt
timeout 260 python3 tools/ab_kernels.py --steps 20 --cases "verify k=4 top-p,top-k 50" \
  --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant b256=replay_kernels --set "b256:filters.ROUND_BLOCK=256" \
  --variant w16=replay_kernels --set "w16:filters.ROUND_BLOCK=1024" --set "w16:filters.ROUND_WARPS=16" \
  2>&1 | grep -v -i "warn" | tee /tmp/o/ab_rounds.txt
echo "ab rc=${PIPESTATUS[0]}"
timeout 100 python3 tools/profile_kernels.py --sequence --launches 10 2>&1 | grep -v -i warn > /tmp/o/sequence_rounds.txt
echo "sequence rc=$?"; awk '/k=4 top_p=0.9/{f=1} f' /tmp/o/sequence_rounds.txt | grep -E "round|stats|mass|device time" | head -20
tar czf $OUT/rounds.tgz -C /tmp/o .
