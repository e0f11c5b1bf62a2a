#!/usr/bin/env bash
# Twentieth session, call 1: the GPU tests of the gather (test_gpu_gathered_bounds_at_a_real_vocabulary had not run on
# the GPU since its fix); the threshold's block maxima held in registers (THRESHOLD_CHUNK 1024 at 16 or 8 warps, 512 at
# 8: `t1k16`, `t1k8`, `t512`; the tree keeps 256 at 8: 4 chunks re-read from L2 each round), 3 rounds with it (`r3`);
# `tree` = the solve's and threshold's scalar loads issued up front; `base` = scratch/s19 = `git archive 7664d86
# replay_kernels`. Then the top-k-alone crossover (R = 1, 2, 4, 8: `g` always gathered, `c` always checked).
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s20/scripts/call1.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c1; mkdir -p $G
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv > $G/gpu.txt 2>&1
timeout 150 python3 -m pytest -q -m gpu tests/test_topk_gather.py tests/test_kernels.py tests/test_sample_check.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
tar czf $OUT/c1.tgz -C $G .
T="topk_gather.THRESHOLD"
timeout 230 python3 tools/ab_kernels.py --kernels --steps 3 --cases "top-k 50 + top-p 0.9" \
  --variant base=scratch/s19/replay_kernels --variant tree=replay_kernels \
  --variant t1k16=replay_kernels --set "t1k16:${T}_CHUNK=1024" --set "t1k16:${T}_WARPS=16" \
  --variant t1k8=replay_kernels --set "t1k8:${T}_CHUNK=1024" \
  --variant t512=replay_kernels --set "t512:${T}_CHUNK=512" \
  --variant r3=replay_kernels --set "r3:${T}_CHUNK=1024" --set "r3:${T}_WARPS=16" --set "r3:${T}_ROUNDS=3" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c1.tgz -C $G .
timeout 130 python3 tools/ab_kernels.py --kernels --steps 3 \
  --cases "top-k 50 R=1,top-k 50 R=2,top-k 50 R=4,top-k 50 R=8" \
  --variant t1k16=replay_kernels --set "t1k16:${T}_CHUNK=1024" --set "t1k16:${T}_WARPS=16" \
  --variant g=replay_kernels --set "g:${T}_CHUNK=1024" --set "g:${T}_WARPS=16" --set "g:plain.CHECK_TOP_K_BELOW=0" \
  --variant c=replay_kernels --set "c:${T}_CHUNK=1024" --set "c:${T}_WARPS=16" --set "c:plain.CHECK_TOP_K_BELOW=1 << 31" \
  2>&1 | grep -v -i warn > $G/ab_cross.txt
echo "ab cross rc=$?"; grep "^|" $G/ab_cross.txt
tar czf $OUT/c1.tgz -C $G .
