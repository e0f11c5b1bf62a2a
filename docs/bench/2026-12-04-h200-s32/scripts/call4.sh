#!/usr/bin/env bash
# Thirty-second session, call 4 (carry scratch; make_variants.sh first): the tree's PDL trigger rule (early only
# where the next recorded launch waits; late at a sequence's end, before a kernel that does not wait, for the
# open-row launch and the fused position launch) against head (9b062f2: every trigger early); then the GPU tests
# of the launches and the one launch, and the committed fixtures on CUDA.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s32/scripts/call4.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call4; mkdir -p $G
timeout 260 python3 tools/ab_kernels.py --steps 5 --variant head=scratch/head/replay_kernels --variant tree=replay_kernels \
  --cases "SYNTHETIC plain R=1$,SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 R=1$,SYNTHETIC verify k=4 R=8$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC top-k 50 + top-p 0.9 R=64$" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "== ab rc=${PIPESTATUS[0]}"; grep -E "^\||DIFFER|Error" $G/ab.txt
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_launches.py tests/test_one_launch.py tests/test_kernels.py > $G/gpu_tests.txt 2>&1
echo "== gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
timeout 120 python3 -m replay_harness.cli run fixtures/*/ --impl stochastic --against reference --device cuda > $G/fixtures_cuda.txt 2>&1
echo "== fixtures on CUDA rc=$?"; tail -3 $G/fixtures_cuda.txt
