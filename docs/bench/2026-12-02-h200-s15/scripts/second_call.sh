#!/usr/bin/env bash
# Fifteenth session, second device call: the compiled-launcher replay (replay_kernels/launches.py).
# scratch/base = git archive 1215c80 replay_kernels; scratch/rec = git archive e9d99d0 replay_kernels.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > /tmp/o/gpu_tests_direct.txt 2>&1
rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/o/gpu_tests_direct.txt
timeout 120 python3 -m pytest -q tests/test_launches.py -p no:cacheprovider > /tmp/o/launches_tests_cuda.txt 2>&1
echo "launches tests on cuda rc=$?"; tail -2 /tmp/o/launches_tests_cuda.txt
[ $rc -eq 0 ] || { tar czf $OUT/call2.tgz -C /tmp/o .; exit 1; }
for v in base rec tree; do
  if [ $v = tree ]; then pp=$PWD; else pp=$PWD/scratch/$v:$PWD; fi
  PYTHONPATH=$pp timeout 45 python3 docs/bench/2026-12-02-h200-s15/scripts/host_cost.py > /tmp/o/host_cost_$v.txt 2>&1
  echo "== $v rc=$?"; grep -E "µs" /tmp/o/host_cost_$v.txt
done
SKIP_KERNEL_TESTS=1 timeout 290 bash tools/run_gpu_checks.sh > /tmp/o/gpu_checks.txt 2>&1
echo "gpu checks rc=$?"; tail -15 /tmp/o/gpu_checks.txt
tar czf $OUT/call2.tgz -C /tmp/o .
