#!/usr/bin/env bash
# Twenty-third session, call 2: check partials of CHECK_SPAN = 2,048 lanes (was the filter span, 8,192) in every
# path, the verdict's 122 partials one vector (VERDICT_CHUNK = 128), and the open-row launch. Variants: `c8k` =
# the tree with 8,192-lane check spans (call 1's tree but for the verdict chunk); `c144` = the open-row launch
# capped at 144 registers (no spill, 6 slots of 61); `p122` = 122 programs a row (scores kept in registers, 3 slots).
# GPU tests first (the tree), then the A/B against scratch/s23base (git archive 056645d replay_kernels).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s23/scripts/call2.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
timeout 200 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_sample_check.py -p no:cacheprovider \
  > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -12
timeout 370 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.5 R=1$,SYNTHETIC top-p 0.9 R=3$,SYNTHETIC top-k 50 R=1$,SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=1$" \
  --variant base=scratch/s23base/replay_kernels \
  --variant c8k=replay_kernels --set "c8k:sample_check.CHECK_SPAN=8192" \
  --variant tree=replay_kernels \
  --variant c144=replay_kernels --set "c144:one_launch.OPEN_ROW_MAXNREG=144" \
  --variant p122=replay_kernels --set "p122:one_launch.OPEN_ROW_PROGRAMS=122" --set "p122:one_launch.OPEN_ROW_MAXNREG=168" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||differ|mismatch|Error" $G/ab.txt | head -40
