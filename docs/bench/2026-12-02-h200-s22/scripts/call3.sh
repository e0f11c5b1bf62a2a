#!/usr/bin/env bash
# Twenty-second session, call 3: the verdict's span sums loaded VERDICT_UNROLL = 8 spans a step (one L2 round trip
# a step, not one a span: call 2 timed 4.5 µs for the 31 serial loads of the one launch's verdict at P = 122).
# `base` = scratch/s22base (134e8a1); `seq` = this tree with the one launch off (the five-launch sequence with
# the unrolled verdict); `one` = this tree with the one launch below 8 requests (draw spans of 2048 lanes).
# GPU tests first, then the phase times of the one launch (scratch/s22timed: this tree plus globaltimer stores).
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s22/scripts/call3.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c3; mkdir -p $G
timeout 200 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_sample_check.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -8
timeout 100 python3 scratch/s22timed/timed.py 2>&1 | grep -v -i warn | tee $G/timed.txt | head -20
tar czf $OUT/c3.tgz -C $G .
timeout 330 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.5 R=1$,SYNTHETIC top-p 0.9 R=2$,SYNTHETIC top-p 0.9 R=4$,top-k 50 R=1$,top-k 50 R=2$,derived top-p 0.9 R=1$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-k 50 + top-p 0.9 R=1$" \
  --variant base=scratch/s22base/replay_kernels \
  --variant seq=replay_kernels --set "seq:one_launch.ONE_LAUNCH_BELOW=0" \
  --variant one=replay_kernels --set "one:one_launch.ONE_LAUNCH_BELOW=8" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c3.tgz -C $G .
