#!/usr/bin/env bash
# Twenty-third session, call 5: the committed tree after the open-row launch moved to replay_kernels/open_rows.py
# (same kernel source, settle_row imported from one_launch): its GPU tests.
# run(command="timeout 230 bash docs/bench/2026-12-03-h200-s23/scripts/call5.sh")
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call5; mkdir -p $G
timeout 210 python3 -m pytest -q -m gpu tests/test_one_launch.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" $G/gpu_tests.txt | tail -12
