#!/usr/bin/env bash
# SCRATCH (thirteenth session): the first draw of sample-and-check takes each row's max from the tile bounds,
# capped at 96 registers (tree = 2676ae9's prepared patch) against HEAD c9fa6d9 (scratch/base); r80 = tree with
# the later round draws capped at 80 instead of 72 (8 B of spills instead of 24, same 3 programs an SM).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 150 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests.txt 2>&1; rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/o/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $OUT/s13_ab1.tgz -C /tmp/o .; exit 1; }
timeout 300 python3 tools/ab_kernels.py --kernels --cases "top-p,plain R=256,plain R=64" --variant base=scratch/base/replay_kernels \
  --variant tree=replay_kernels --variant r80=scratch/r80/replay_kernels 2>&1 | grep -v -i "warn" | tee /tmp/o/ab1.txt
echo "ab rc=${PIPESTATUS[0]}"
tar czf $OUT/s13_ab1.tgz -C /tmp/o .
