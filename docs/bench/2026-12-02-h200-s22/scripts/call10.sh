#!/usr/bin/env bash
# Twenty-second session, call 10: a cooperative one launch the driver refuses falls back to the launch sequence
# (plain.PlainSampler.launch). The GPU tests of the one launch, the refused one last, alone.
# run(command="timeout 300 bash docs/bench/2026-12-02-h200-s22/scripts/call10.sh")
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c10; mkdir -p $G
timeout 150 python3 -m pytest -q -m gpu tests/test_one_launch.py -k "not too_large" -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
timeout 90 python3 -m pytest -q -m gpu tests/test_one_launch.py -k too_large -p no:cacheprovider > $G/gpu_too_large.txt 2>&1
echo "too-large test rc=$?"; tail -15 $G/gpu_too_large.txt
tar czf $OUT/c10.tgz -C $G .
