#!/usr/bin/env bash
# Fifteenth session, first device call (scratch/base = git archive 1215c80 replay_kernels).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py -p no:cacheprovider > /tmp/o/gpu_tests.txt 2>&1
rc=$?; echo "gpu tests rc=$rc"; tail -5 /tmp/o/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $OUT/call1.tgz -C /tmp/o .; exit 1; }
PYTHONPATH=$PWD/scratch/base:$PWD timeout 45 python3 docs/bench/2026-12-02-h200-s15/scripts/host_cost.py > /tmp/o/host_cost_base.txt 2>&1; echo "host base rc=$?"
timeout 45 python3 docs/bench/2026-12-02-h200-s15/scripts/host_cost.py > /tmp/o/host_cost_tree.txt 2>&1; echo "host tree rc=$?"
grep -E "µs|kernel" /tmp/o/host_cost_base.txt | head -8; grep -E "µs" /tmp/o/host_cost_tree.txt | head -8
timeout 230 python3 tools/ab_kernels.py --kernels --steps 5 --cases "top-p,plain R=256" \
  --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant nocap=replay_kernels --set "nocap:sample_check.FIRST_CHECK_MAXNREG=None" \
  2>&1 | grep -v -i "warn" > /tmp/o/ab_held_once.txt
echo "ab rc=$?"; tail -30 /tmp/o/ab_held_once.txt
tar czf $OUT/call1.tgz -C /tmp/o .
