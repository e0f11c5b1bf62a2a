#!/usr/bin/env bash
# PREPARED in the sixteenth session for the next one's first device call; nothing here has run.
# run(command="timeout 400 bash docs/bench/2026-12-02-h200-s16/scripts/next_first_call.sh", carry=[".peers"])
# The GPU tests on the landed tree, with the new twin test_gpu_finish_loop_settles_rows_the_rounds_leave_open
# (the finish loop's pruned draw at V = 151,936, production shapes, no launched round: it ran on the GPU only
# through the sixteenth session's A/B), then the correctness script of the CUDA checks.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/n; mkdir -p $G
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
SKIP_KERNEL_TESTS=1 timeout 150 bash tools/run_gpu_checks.sh > $G/gpu_checks.txt 2>&1; echo "checks rc=$?"
tail -5 $G/gpu_checks.txt
tar czf $OUT/next.tgz -C $G .
