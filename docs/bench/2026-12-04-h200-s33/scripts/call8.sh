#!/usr/bin/env bash
# Thirty-third session, call 8: the committed tree on CUDA: every committed fixture through `stochastic` against
# `reference`, and the GPU tests of the far-from-the-draft span sums and the launches.
# run(command="timeout 170 bash docs/bench/2026-12-04-h200-s33/scripts/call8.sh")
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call8; mkdir -p $G
timeout 110 python3 -m replay_harness.cli run fixtures/*/ --impl stochastic --against reference --device cuda > $G/fixtures_cuda.txt 2>&1
echo "== fixtures on CUDA rc=$?"; tail -4 $G/fixtures_cuda.txt
left=$((165 - SECONDS)); [ $left -gt 10 ] || exit 0
timeout $left python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_launches.py \
  "tests/test_kernels.py::test_stochastic_span_sums_far_from_the_draft_value" > $G/gpu_tests.txt 2>&1
echo "== gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
