#!/usr/bin/env bash
# Twenty-third session, call 1: the open-row launch (replay_kernels/one_launch.py `_open_rows_kernel`): what the
# first check of sample-and-check leaves open, settled in one cooperative launch of slots x P programs instead of
# three launched (draw, check) rounds and the finish loop. GPU tests first; then A/B against the base
# (scratch/s23base = git archive 056645d replay_kernels) with P = 61 (tree), 31 and 122 programs a row.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s23/scripts/call1.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call1; mkdir -p $G
timeout 200 python3 -m pytest -q -m gpu tests/test_one_launch.py tests/test_sample_check.py -p no:cacheprovider \
  > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -12
timeout 370 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=64$" \
  --variant base=scratch/s23base/replay_kernels \
  --variant tree=replay_kernels \
  --variant p31=replay_kernels --set "p31:one_launch.OPEN_ROW_PROGRAMS=31" \
  --variant p122=replay_kernels --set "p122:one_launch.OPEN_ROW_PROGRAMS=122" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||differ|mismatch" $G/ab.txt | head -60
