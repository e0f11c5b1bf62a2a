#!/usr/bin/env bash
# Fifteenth session, fourth device call: sample-and-check launches only the rounds the step's top-p needs.
# scratch/head = git archive 74f670b replay_kernels (EXTRA_ROUNDS = 3 always).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT; mkdir -p /tmp/g/bench
timeout 200 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > /tmp/g/gpu_tests.txt 2>&1
rc=$?; echo "gpu tests rc=$rc"; tail -3 /tmp/g/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $R/call4.tgz -C /tmp/g .; exit 1; }
timeout 200 python3 tools/ab_kernels.py --kernels --steps 12 --cases "top-p 0.9 R=1,top-p 0.5 R=1,top-p 0.9 R=8,top-p 0.9 R=64" \
  --variant base=scratch/head/replay_kernels --variant tree=replay_kernels \
  --variant r0=replay_kernels --set "r0:sample_check.EXTRA_ROUNDS=0" 2>&1 | grep -v -i warn > /tmp/g/ab_rounds.txt
echo "ab rc=$?"; grep "^|" /tmp/g/ab_rounds.txt
OUT=/tmp/g/bench timeout 150 bash tools/run_gpu_bench.sh --vocab 248320 --top-p 1.0,0.9 --cases plain --budget-s 90 \
  > /tmp/g/bench/stdout.txt 2>&1; echo "bench rc=$?"
grep -A14 "^| R | k" /tmp/g/bench/stdout.txt
tar czf $R/call4.tgz -C /tmp/g .
