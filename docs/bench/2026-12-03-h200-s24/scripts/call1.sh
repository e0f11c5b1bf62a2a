#!/usr/bin/env bash
# Twenty-fourth session, call 1: the verify + top-p bounds with level masses (verify_stats.LEVELS: the mass at
# or above x_d - 2, - 4, - 8, - 16 bounds the first kept token's mass). GPU kernel tests; A/B against
# scratch/s24base (git archive 9ce46c2 replay_kernels) over 20 SYNTHETIC steps a case; the launch sequence and
# the rows the exact-cut fallback lists on 20 steps (tree).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s24/scripts/call1.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call1; mkdir -p $G
timeout 150 python3 -m pytest -q -m gpu tests/test_kernels.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -8
timeout 260 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$" \
  --variant base=scratch/s24base/replay_kernels --variant tree=replay_kernels \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||differ|DIFFER|mismatch|Error" $G/ab.txt | head -30
timeout 150 python3 tools/profile_kernels.py --sequence --launches 10 > $G/profile_sequence.txt 2>&1
echo "profile rc=$?"; grep -E "^## |Rows the fallback" $G/profile_sequence.txt | head -30
