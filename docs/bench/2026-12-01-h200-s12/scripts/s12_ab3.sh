#!/usr/bin/env bash
# SCRATCH (twelfth session): the rounds launch, third try: counters on their own L2 lines, no naps, cap 96;
# variants: more splits a row, no cap, 8 warps (2048-lane draw tiles), naps.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 150 python3 -m pytest -q -m gpu tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests3.txt 2>&1; rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/o/gpu_tests3.txt
[ $rc -eq 0 ] || { tar czf $OUT/s12_ab3.tgz -C /tmp/o .; exit 1; }
timeout 330 python3 tools/ab_kernels.py --kernels --cases top-p --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant s16=replay_kernels --variant nocap=replay_kernels --variant w8=replay_kernels --variant nap=replay_kernels \
  --set 's16:sample_check.ROUND_SPLIT_AS_ROWS=16' \
  --set 'nocap:check_rounds.ROUNDS_MAXNREG=None' \
  --set 'w8:sample_check.CHECK_WARPS=8' --set 'w8:check_rounds.CHECK_WARPS=8' --set 'w8:sample_check.ROUND_DRAW_SHAPES=((1 << 31, 2048, 8, 1024, True, None),)' \
  --set 'nap:check_rounds.NAP_WAITS=True' \
  2>&1 | tee /tmp/o/ab3.txt
echo "ab rc=${PIPESTATUS[0]}"
tar czf $OUT/s12_ab3.tgz -C /tmp/o .
