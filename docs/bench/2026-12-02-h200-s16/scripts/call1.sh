#!/usr/bin/env bash
# Sixteenth session, first device call: the first check tests the first draw's runner-up (tree) against HEAD
# 3ad3946 (scratch/base); the tree with 512-lane check tiles (b512: no spill of the first check, 80 registers;
# 1024: 200 B of stack, tools/kernel_resources.py with triton 3.6), and with the below-8-rows draw capped at 72
# registers instead of 64 (b512c72: the R = 1 first draw's 16 B of stack gone); the bench on the tree; then the prepared
# finish-loop prune (scratch/prune = 3ad3946 + s15 finish_prune.patch) timed with no launched round (r0).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT; G=/tmp/g; mkdir -p $G/bench
timeout 170 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
rc=$?; echo "gpu tests rc=$rc"; tail -3 $G/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $R/call1.tgz -C $G .; exit 1; }
timeout 200 python3 tools/ab_kernels.py --kernels --steps 8 \
  --cases "SYNTHETIC top-p 0.9 R=1,top-p 0.9 R=8,SYNTHETIC top-p 0.9 R=64,top-p 0.9 R=256,Qwen2.5-derived top-p,verify k=4 top-p,SYNTHETIC plain R=64" \
  --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant b512=replay_kernels --set "b512:sample_check.CHECK_BLOCK=512" \
  --variant b512c72=replay_kernels --set "b512c72:sample_check.CHECK_BLOCK=512" \
  --set "b512c72:draw.DRAW_SHAPES=((8, 2048, 8, DRAW_PROGRAMS, False, 72),) + DRAW_SHAPES[1:]" 2>&1 | grep -v -i warn > $G/ab_runner_up.txt
echo "ab rc=$?"; grep "^|" $G/ab_runner_up.txt
OUT=$G/bench timeout 150 bash tools/run_gpu_bench.sh --vocab 248320 --top-p 1.0,0.9 --budget-s 120 \
  > $G/bench/stdout.txt 2>&1; echo "bench rc=$?"
grep -A16 "^| R | k" $G/bench/stdout.txt | head -40
tar czf $R/call1.tgz -C $G .
timeout 60 python3 tools/ab_kernels.py --kernels --steps 3 --cases "SYNTHETIC top-p 0.9 R=8" \
  --variant base_r0=scratch/base/replay_kernels --set "base_r0:sample_check.EXTRA_ROUNDS=0" \
  --variant prune_r0=scratch/prune/replay_kernels --set "prune_r0:sample_check.EXTRA_ROUNDS=0" \
  2>&1 | grep -v -i warn > $G/ab_finish_prune.txt
echo "ab2 rc=$?"; grep "^|" $G/ab_finish_prune.txt; grep "_finish_kernel [0-9][0-9]" $G/ab_finish_prune.txt | cut -c1-200
tar czf $R/call1.tgz -C $G .
