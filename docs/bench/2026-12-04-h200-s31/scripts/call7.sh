#!/usr/bin/env bash
# (The base: mkdir -p scratch/s31 && git archive 95e6b6f replay_kernels | tar x -C scratch/s31.)
# Thirty-first session, call 7 (carry scratch; scratch/s31 = git archive 95e6b6f replay_kernels): the first draw's
# top[1] flag made row-level (one lane holds the row's top, whatever the drawn token) and the open-row launch
# keeping a redraw at that value without its check phase (tree) against 95e6b6f; then the open-row GPU tests.
# Ordered by what matters most: the GPU time left was under 300 s.
# run(command="bash docs/bench/2026-12-04-h200-s31/scripts/call7.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call7; mkdir -p $G
C="SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=16$,Qwen2.5-derived top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$"
timeout 110 python3 tools/ab_kernels.py --steps 6 --variant base=scratch/s31/replay_kernels --variant tree=replay_kernels \
  --cases "$C" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error" $G/ab.txt
timeout 60 python3 -m pytest -q tests/test_one_launch.py -p no:cacheprovider -k "held_once_at_the_top_without or two_lanes_hold" > $G/test_new_cuda.txt 2>&1
echo "new open-row tests on cuda rc=$? $(tail -1 $G/test_new_cuda.txt)"
timeout 90 python3 -m pytest -q -m gpu tests/test_one_launch.py -p no:cacheprovider -k "open_rows or held" > $G/gpu_test_open_rows.txt 2>&1
echo "gpu open-row tests rc=$? $(tail -1 $G/gpu_test_open_rows.txt)"
