#!/usr/bin/env bash
# Twenty-second session, call 1: the one launch with its draw scores kept in registers across rounds (a redraw is
# a masked maximum), the barrier waiting on volatile reads; draw spans of 2048 / 1024 / 512 lanes (`b2048`,
# `b1024`, `b512`; all allowed up to R = 7 where their programs fit, else the sequence). `base` = scratch/s22base
# (134e8a1, the five-launch sequence). GPU tests first.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s22/scripts/call1.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c1; mkdir -p $G
timeout 200 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_sample_check.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -8
tar czf $OUT/c1.tgz -C $G .
timeout 330 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.5 R=1$,SYNTHETIC top-p 0.9 R=2$,SYNTHETIC top-p 0.9 R=4$,top-k 50 R=1$,top-k 50 R=2$,derived top-p 0.9 R=1$" \
  --variant base=scratch/s22base/replay_kernels \
  --variant b2048=replay_kernels --set "b2048:one_launch.ONE_LAUNCH_BELOW=8" \
  --variant b1024=replay_kernels --set "b1024:one_launch.ONE_LAUNCH_BELOW=8" --set "b1024:one_launch.DRAW_BLOCK=1024" \
  --variant b512=replay_kernels --set "b512:one_launch.ONE_LAUNCH_BELOW=8" --set "b512:one_launch.DRAW_BLOCK=512" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c1.tgz -C $G .
