#!/usr/bin/env bash
# SCRATCH (twelfth session): the rounds launch with napping waits; first check fused or not; register caps.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 150 python3 -m pytest -q -m gpu tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests2.txt 2>&1; rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/o/gpu_tests2.txt
[ $rc -eq 0 ] || { tar czf $OUT/s12_ab2.tgz -C /tmp/o .; exit 1; }
timeout 300 python3 tools/ab_kernels.py --kernels --cases top-p --variant base=scratch/base/replay_kernels --variant fused=replay_kernels \
  --variant sep=replay_kernels --variant sep96=replay_kernels --variant sepd2k=replay_kernels \
  --set 'sep:check_rounds.FIRST_CHECK_FUSED_BELOW=0' \
  --set 'sep96:check_rounds.FIRST_CHECK_FUSED_BELOW=0' --set 'sep96:check_rounds.ROUNDS_MAXNREG=96' \
  --set 'sepd2k:check_rounds.FIRST_CHECK_FUSED_BELOW=0' --set 'sepd2k:sample_check.ROUND_DRAW_SHAPES=((1 << 31, 2048, 4, 1024, True, None),)' \
  2>&1 | tee /tmp/o/ab2.txt
echo "ab rc=${PIPESTATUS[0]}"
tar czf $OUT/s12_ab2.tgz -C /tmp/o .
