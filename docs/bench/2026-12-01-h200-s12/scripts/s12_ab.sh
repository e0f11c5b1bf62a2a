#!/usr/bin/env bash
# SCRATCH (twelfth session): sample-and-check's later rounds in one ticketed launch (check_rounds) against
# HEAD's kernels (scratch/base = git archive 3370896), variants by --set; CUDA tests first.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 150 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests.txt 2>&1; rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/o/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $OUT/s12_ab.tgz -C /tmp/o .; exit 1; }
timeout 300 python3 tools/ab_kernels.py --kernels --cases top-p,plain --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant sep=replay_kernels --variant nocap=replay_kernels \
  --set 'sep:check_rounds.FIRST_CHECK_FUSED_BELOW=0' \
  --set 'nocap:check_rounds.ROUNDS_MAXNREG=None' 2>&1 | tee /tmp/o/ab1.txt
echo "ab rc=${PIPESTATUS[0]}"
tar czf $OUT/s12_ab.tgz -C /tmp/o .
