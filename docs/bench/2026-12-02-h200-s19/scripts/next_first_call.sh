#!/usr/bin/env bash
# PREPARED in the nineteenth session for the next one's first device call; nothing here has run.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s19/scripts/next_first_call.sh", carry=["scratch", ".peers"])
#
# 1. The GPU tests of the gather, first: test_gpu_gathered_bounds_at_a_real_vocabulary was fixed after the session's
#    last call (its masked row had more finite values than GATHER_CAP) and has not run on the GPU since.
# 2. THRESHOLD_ROUNDS 3 against 4 on real rows (Qwen2.5- and SmolLM2-derived top-k 50 + top-p 0.9; 3 was 2% faster on
#    SYNTHETIC rows, call 3), and the top-k-alone crossover at R = 1, 2, 4, 8 after the row solve
#    (`g`: always gathered, `c`: always checked; the rule CHECK_TOP_K_BELOW = 8 came from call 2, before it).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/n; mkdir -p $G
timeout 150 python3 -m pytest -q -m gpu tests/test_topk_gather.py tests/test_kernels.py tests/test_sample_check.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
tar czf $OUT/next.tgz -C $G .
timeout 250 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "top-k 50 + top-p 0.9,top-k 50 R=1,top-k 50 R=2,top-k 50 R=4,top-k 50 R=8" \
  --variant tree=replay_kernels --variant r3=replay_kernels --set "r3:topk_gather.THRESHOLD_ROUNDS=3" \
  --variant g=replay_kernels --set "g:plain.CHECK_TOP_K_BELOW=0" \
  --variant c=replay_kernels --set "c:plain.CHECK_TOP_K_BELOW=1 << 31" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/next.tgz -C $G .
