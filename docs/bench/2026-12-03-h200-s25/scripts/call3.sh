#!/usr/bin/env bash
# Twenty-fifth session, call 3: the softmax terms' exp in one MUFU.EX2 (replay_kernels/ex2.py: ex2.approx.ftz of
# the same product tl.exp takes; the position stats and the check's masses), on top of the two-pass bounded stats
# of call 1. A/B against scratch/s25base (git archive 60eb993): tree = both; noftz = the tree with ex2.FTZ off
# (tl.exp: call 1's tree). Tokens compared in every step. GPU tests of the kernels, sample-and-check, one launch.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s25/scripts/call3.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
timeout 330 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,SYNTHETIC plain R=64$" \
  --variant base=scratch/s25base/replay_kernels --variant tree=replay_kernels --variant noftz=replay_kernels \
  --set "noftz:ex2.FTZ=tl.constexpr(False)" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||differ|DIFFER|mismatch|Error" $G/ab.txt | head -30; grep "^\*" $G/ab.txt | head -30
timeout 230 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_one_launch.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -8
