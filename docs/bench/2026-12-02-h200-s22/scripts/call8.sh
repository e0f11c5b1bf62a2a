#!/usr/bin/env bash
# Twenty-second session, call 8: the committed tree (0433a70, the span stores of the one launch factored into one
# function: same sm_90 code size and registers) through the GPU tests of every kernel it touches, and a short A/B.
# run(command="timeout 400 bash docs/bench/2026-12-02-h200-s22/scripts/call8.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c8; mkdir -p $G
timeout 240 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_sample_check.py tests/test_kernels.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
tar czf $OUT/c8.tgz -C $G .
timeout 120 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-k 50 R=3$,derived top-p 0.9 R=1$" \
  --variant base=scratch/s22base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c8.tgz -C $G .
