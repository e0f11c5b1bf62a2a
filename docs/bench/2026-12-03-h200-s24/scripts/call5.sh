#!/usr/bin/env bash
# Twenty-fourth session, call 5: the committed tree (two levels; VERIFY_MISS = 0.125: the open-row launch for a
# verify's draws up to R = 64; FALLBACK_GRID_ROWS = 8): A/B against scratch/s24base over 20 steps; GPU kernel tests;
# the CUDA correctness checks (replay run / verify of every fixture on CUDA).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s24/scripts/call5.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call5; mkdir -p $G
timeout 100 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  --variant base=scratch/s24base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||differ|DIFFER|mismatch|Error" $G/ab.txt | head -10
timeout 250 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_one_launch.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -8
OUT=$G SKIP_KERNEL_TESTS=1 SKIP_IMPL_TESTS=1 timeout 200 bash tools/run_gpu_checks.sh > /dev/null 2>&1
echo "checks rc=$?"; grep -E "^==== exit|== done" $G/log.txt | head -20
