#!/usr/bin/env bash
# SCRATCH (twelfth session): the check pass loads two tiles at once (same sums bit for bit) against HEAD
# (scratch/base = git archive 3370896); register caps as variants; CUDA tests first; ncu of the first check.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
mkdir -p /tmp/o
timeout 150 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests5.txt 2>&1; rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/o/gpu_tests5.txt
[ $rc -eq 0 ] || { tar czf $OUT/s12_ab5.tgz -C /tmp/o .; exit 1; }
timeout 240 python3 tools/ab_kernels.py --kernels --cases top-p --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant cap72=replay_kernels --variant cap64=replay_kernels \
  --set 'cap72:sample_check.CHECK_MAXNREG=72' --set 'cap64:sample_check.CHECK_MAXNREG=64' \
  2>&1 | tee /tmp/o/ab5.txt
echo "ab rc=${PIPESTATUS[0]}"
timeout 90 "$NCU" --section SpeedOfLight --section Occupancy --kernel-name regex:_check_kernel --launch-skip 8 --launch-count 1 --csv \
  python3 tools/ncu_target.py --impl gumbel-max --R 256 --k 0 --top-p 0.9 2>&1 | python3 tools/ncu_summary.py | tee /tmp/o/ncu_check_pairs.txt
tar czf $OUT/s12_ab5.tgz -C /tmp/o .
