#!/usr/bin/env bash
# (run on the device; scratch/base = `git archive ce670c5 replay_kernels`; variants other than `tree` were temporary
# edits of the tree, described in docs/BENCHMARKS.md "eleventh session", not committed)
# SCRATCH (eleventh session): A/B of the check pass (one compare a sum) and the later draws' exact bounds
# (tree) against HEAD's kernels (scratch/base), round-draw shapes as variants; CUDA tests; ncu of the check.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
mkdir -p /tmp/o
timeout 120 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests.txt 2>&1; echo "gpu tests rc=$?"; tail -2 /tmp/o/gpu_tests.txt
timeout 330 python3 tools/ab_kernels.py --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant r512=replay_kernels --variant r1024=replay_kernels \
  --set 'r512:sample_check.ROUND_DRAW_SHAPES=((1 << 31, 512, 1, 4096, True, None),)' \
  --set 'r1024:sample_check.ROUND_DRAW_SHAPES=((1 << 31, 1024, 4, 1024, True, None),)' "$@" 2>&1 | tee /tmp/o/ab.txt
echo "ab rc=${PIPESTATUS[0]}"
timeout 90 "$NCU" --section SpeedOfLight --section Occupancy --kernel-name regex:_check_kernel --launch-skip 8 --launch-count 1 --csv \
  python3 tools/ncu_target.py --impl gumbel-max --R 256 --k 0 --top-p 0.9 2>&1 | python3 tools/ncu_summary.py | tee /tmp/o/ncu_check.txt
tar czf $OUT/s11_ab.tgz -C /tmp/o .
