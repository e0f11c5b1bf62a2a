#!/usr/bin/env bash
# Eighteenth session, call 5: the draw skips tiles that are only -inf once processed (wholly below the filter bound,
# or all -inf). scratch/gather = `git archive 71bdf91 replay_kernels` (the gather, before this); replay_kernels = tree.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c5; mkdir -p $G
timeout 230 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "top-k 50 + top-p 0.9,verify k=4 top-k 50 R,SYNTHETIC plain R=256,SYNTHETIC verify k=4 R=64,SYNTHETIC top-p 0.9 R=64,Qwen2.5-derived top-p 0.9 R=64,Qwen2.5-derived verify k=4 R=256" \
  --variant gather=scratch/gather/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab_draw_empty.txt
echo "ab rc=$?"; grep "^|" $G/ab_draw_empty.txt; grep "^\*" $G/ab_draw_empty.txt | grep "top-k 50 + top-p 0.9 R=256"
tar czf $OUT/c5.tgz -C $G .
timeout 150 python3 -m pytest -q -m gpu tests/test_topk_gather.py tests/test_kernels.py tests/test_sample_check.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
tar czf $OUT/c5.tgz -C $G .
