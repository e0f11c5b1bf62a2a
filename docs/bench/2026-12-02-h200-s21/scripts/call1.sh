#!/usr/bin/env bash
# Twenty-first session, call 1: sample-and-check's first draw keeps the row's top 4 of the Gumbel order and the
# first check tests them all (draw_cands.py, check_sums.py). A/B against c2754be (`base`, scratch/s21base:
# `git archive c2754be replay_kernels`), `c2`: two candidates; then the GPU tests of the touched kernels.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s21/scripts/call1.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c1; mkdir -p $G
timeout 330 python3 tools/ab_kernels.py --kernels --steps 3 \
  --cases "SYNTHETIC top-p,Qwen2.5-derived top-p,verify k=4 top-p 0.9 R=64,top-k 50 R=1,top-k 50 R=2,SYNTHETIC plain R=64" \
  --variant base=scratch/s21base/replay_kernels --variant tree=replay_kernels \
  --variant c2=replay_kernels --set "c2:draw.SAMPLE_CANDS=2" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c1.tgz -C $G .
timeout 230 python3 -m pytest -q -m gpu --durations=4 tests/test_sample_check.py tests/test_kernels.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -7 $G/gpu_tests.txt
tar czf $OUT/c1.tgz -C $G .
