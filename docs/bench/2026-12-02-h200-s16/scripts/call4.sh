#!/usr/bin/env bash
# Sixteenth session, fourth (last) device call: the first check sums the runner-up's terms only when the draw
# vouched for one (a row without, most of a peaked step's, pays the one-candidate pass). GPU tests; A/B of
# base512 (3ad3946 with 512-lane check tiles), tree (margin 2) and m0 (margin 0); the bench on the tree.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT; G=/tmp/g; mkdir -p $G/bench
timeout 170 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
rc=$?; echo "gpu tests rc=$rc"; tail -3 $G/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $R/call4.tgz -C $G .; exit 1; }
timeout 130 python3 tools/ab_kernels.py --kernels --steps 8 \
  --cases "SYNTHETIC top-p 0.9 R=1,top-p 0.9 R=8,SYNTHETIC top-p 0.9 R=64,top-p 0.9 R=256,Qwen2.5-derived top-p,verify k=4 top-p" \
  --variant base512=scratch/base/replay_kernels --set "base512:sample_check.CHECK_BLOCK=512" \
  --variant tree=replay_kernels \
  --variant m0=replay_kernels --set "m0:draw.RUNNER_UP_MARGIN=tl.constexpr(0.0)" \
  2>&1 | grep -v -i warn > $G/ab_final.txt
echo "ab rc=$?"; grep "^|" $G/ab_final.txt
tar czf $R/call4.tgz -C $G .
OUT=$G/bench timeout 150 bash tools/run_gpu_bench.sh --vocab 248320 --top-p 1.0,0.9 --budget-s 110 \
  > $G/bench/stdout.txt 2>&1; echo "bench rc=$?"
grep -A16 "^| R | k" $G/bench/stdout.txt | head -40
tar czf $R/call4.tgz -C $G .
