#!/usr/bin/env bash
# Twenty-fifth session, call 5: tools/run_gpu_checks.sh on the committed tree (2861f19 + the ex2 tests): replay
# run of every fixture through stochastic against reference on CUDA, the founding case, replay verify, bench.
# run(command="timeout 330 bash docs/bench/2026-12-03-h200-s25/scripts/call5.sh")
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call5; mkdir -p $G
SKIP_KERNEL_TESTS=1 SKIP_IMPL_TESTS=1 timeout 320 bash tools/run_gpu_checks.sh > $G/gpu_checks.txt 2>&1
echo "gpu checks rc=$?"; grep -E "^==|exit|unexpected" $G/gpu_checks.txt | tail -24
