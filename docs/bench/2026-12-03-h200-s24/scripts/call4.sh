#!/usr/bin/env bash
# Twenty-fourth session, call 4: the tree (two levels) against scratch/s24base over 20 SYNTHETIC steps a case, with
# variants of the tree: m01 counts 0.1 (not 1.0) expected misses a checked verify request (stochastic.VERIFY_MISS),
# so R = 64 settles what the first check leaves open in the open-row launch (61 programs a row, 8 slots) instead
# of the rounds; g8 runs the fallback's filter passes on 8 programs along rows, not 32 (idle passes cost less; up to
# 8 listed rows at once); m01g8 both. GPU kernel tests.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s24/scripts/call4.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call4; mkdir -p $G
timeout 330 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$" \
  --variant base=scratch/s24base/replay_kernels --variant tree=replay_kernels --variant m01=replay_kernels \
  --variant g8=replay_kernels --variant m01g8=replay_kernels --set "m01:stochastic.VERIFY_MISS=0.1" \
  --set "g8:verify_bounds.FALLBACK_GRID_ROWS=8" --set "m01g8:stochastic.VERIFY_MISS=0.1" \
  --set "m01g8:verify_bounds.FALLBACK_GRID_ROWS=8" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||differ|DIFFER|mismatch|Error" $G/ab.txt | head -30; grep "^\*" $G/ab.txt | grep "top-p 0.9 R=64"
timeout 170 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_one_launch.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -8
