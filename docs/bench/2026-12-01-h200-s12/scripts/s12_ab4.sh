#!/usr/bin/env bash
# SCRATCH (twelfth session): the rounds launch, fourth try: how waiting programs poll (acquire or relaxed atomics, volatile loads, naps);
# counters on their own L2 lines, cap 96.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 150 python3 -m pytest -q -m gpu tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests4.txt 2>&1; rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/o/gpu_tests4.txt
[ $rc -eq 0 ] || { tar czf $OUT/s12_ab4.tgz -C /tmp/o .; exit 1; }
timeout 330 python3 tools/ab_kernels.py --kernels --cases top-p --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant p0=replay_kernels --variant p2=replay_kernels --variant p3=replay_kernels --variant p1s16=replay_kernels \
  --set 'p0:check_rounds.WAIT_POLL=0' --set 'p2:check_rounds.WAIT_POLL=2' --set 'p3:check_rounds.WAIT_POLL=3' \
  --set 'p1s16:sample_check.ROUND_SPLIT_AS_ROWS=16' \
  2>&1 | tee /tmp/o/ab4.txt
echo "ab rc=${PIPESTATUS[0]}"
tar czf $OUT/s12_ab4.tgz -C /tmp/o .
