#!/usr/bin/env bash
# (At the time `replay_kernels` was single.patch applied to 878e9fb: scratch/single after make_variants.sh.)
# Thirty-first session, call 4 (carry scratch): the adopted change (call 3's `single`: the floor's loads in flight
# with the first draw span's, the first-round-only reductions skipped later) at the tree: GPU tests of the one launch
# and the open rows, an A/B over 20 steps against the base (878e9fb) with the plain draw in the same run, and every
# committed fixture through stochastic against reference on CUDA.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s31/scripts/call4.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call4; mkdir -p $G
timeout 150 python3 -m pytest -q -m gpu tests/test_one_launch.py -p no:cacheprovider > $G/gpu_test_one_launch.txt 2>&1
echo "gpu test_one_launch rc=$? $(tail -1 $G/gpu_test_one_launch.txt)"
C="SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=64$"
timeout 300 python3 tools/ab_kernels.py --steps 20 --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --cases "$C" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error" $G/ab.txt
timeout 120 python3 -m replay_harness.cli run fixtures/*/ --impl stochastic --against reference --device cuda > $G/run_fixtures.txt 2>&1
echo "replay run fixtures stochastic vs reference cuda rc=$?"; tail -4 $G/run_fixtures.txt
