#!/usr/bin/env bash
# PREPARED in the twentieth session for the next one's first device call; run in the twenty-first as call 0
# (docs/BENCHMARKS.md twenty-first section; docs/bench/2026-12-02-h200-s21/call0/).
# Before the call, on the dev machine: mkdir -p scratch/s20b && git archive 25eb9b8 replay_kernels | tar -x -C scratch/s20b
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s20/scripts/next_first_call.sh", carry=["scratch", ".peers"])
#
# 1. The GPU tests (the solve now sorts rows of at most SORT_SMALL = 64 candidates at width 64, the others at 256:
#    compiled for sm_90 here, never run on the GPU).
# 2. A/B against 25eb9b8 (`base`: every row sorted at 256, call 4's tree) on SYNTHETIC and real-derived top-k steps;
#    `s256`: the tree with SORT_SMALL = 0 (every row at 256 through the two-width code).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/n; mkdir -p $G
timeout 240 python3 -m pytest -q -m gpu --durations=4 tests/test_topk_gather.py tests/test_kernels.py \
  tests/test_sample_check.py tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -7 $G/gpu_tests.txt
tar czf $OUT/next.tgz -C $G .
timeout 200 python3 tools/ab_kernels.py --kernels --steps 3 \
  --cases "Qwen2.5-derived top-k,SmolLM2-derived top-k,SYNTHETIC top-k 50 + top-p 0.9,SYNTHETIC top-k 50 R=" \
  --variant base=scratch/s20b/replay_kernels --variant tree=replay_kernels \
  --variant s256=replay_kernels --set "s256:topk_gather.SORT_SMALL=0" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/next.tgz -C $G .
