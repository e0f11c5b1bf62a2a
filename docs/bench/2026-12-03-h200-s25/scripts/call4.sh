#!/usr/bin/env bash
# Twenty-fifth session, call 4: the first draw's tail (the last program of a row: the token, the row's top and
# whether one lane holds it) with every load before its first store, and the held-once recount two tiles a load
# (partials.RECOUNT_TILES), on top of call 3's tree. A/B against scratch/s25base (git archive 60eb993) and
# scratch/s25c3 (git archive 2861f19, call 3's tree); rc1 = the tree with one tile a load. Not adopted: the tree
# of this call is 2861f19 + first_draw_tail.patch (this folder; rewritten from the session's edit after the call,
# same sm_90 compile size within 16 instructions). To rerun: apply it to a copy and point --variant tree at it. Then tests/test_ex2.py and the GPU tests of
# sample-and-check.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s25/scripts/call4.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call4; mkdir -p $G
timeout 280 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,Qwen2.5-derived top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC plain R=64$" \
  --variant base=scratch/s25base/replay_kernels --variant c3=scratch/s25c3/replay_kernels --variant tree=replay_kernels --variant rc1=replay_kernels \
  --set "rc1:partials.RECOUNT_TILES=tl.constexpr(1)" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||differ|DIFFER|mismatch|Error" $G/ab.txt | head -30; grep "^\*" $G/ab.txt | head -30
timeout 120 python3 -m pytest -q tests/test_ex2.py -p no:cacheprovider > $G/ex2_tests.txt 2>&1
echo "ex2 tests rc=$?"; tail -3 $G/ex2_tests.txt
timeout 120 python3 -m pytest -q -m gpu tests/test_sample_check.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -4
