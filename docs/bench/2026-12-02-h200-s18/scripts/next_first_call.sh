#!/usr/bin/env bash
# PREPARED in the eighteenth session for the next one's first device call; nothing here has run.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s18/scripts/next_first_call.sh", carry=["scratch", ".peers"])
#
# 1. The crossover of top-k alone: sample-and-check (plain.CHECK_TOP_K = True, the default) against the gathered bound
#    (False), at R = 1, 8, 32, 64, 256 (call 7 measured 1, 64, 256: 17.9 / 45.6, 125.0 / 109.8, 293.7 / 254.5).
#    A rule "gathered from R >= n" changes no token (both exact, no sums): set it from this table.
# 2. The gather's fallback search with one program along rows (params.GATHER_SEARCH_ROWS = 1 instead of 8): its 21
#    launches run empty in nearly every step (about 23 µs at R = 64 in a graph); fewer programs may cost less.
# 3. The GPU tests and the top-k bench against FlashInfer on the tree.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/n; mkdir -p $G
timeout 200 python3 tools/ab_kernels.py --kernels --steps 5 --cases "SYNTHETIC top-k 50 R,top-k 50 + top-p 0.9" \
  --variant check=replay_kernels --variant g=replay_kernels --set "g:plain.CHECK_TOP_K=False" \
  --variant s1=replay_kernels --set "s1:params.GATHER_SEARCH_ROWS=1" 2>&1 | grep -v -i warn > $G/ab_topk.txt
echo "ab rc=$?"; grep "^|" $G/ab_topk.txt
tar czf $OUT/next.tgz -C $G .
timeout 150 python3 -m pytest -q -m gpu tests/test_topk_gather.py tests/test_kernels.py tests/test_sample_check.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 150 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_topk --vocab 248320 \
  --cases plain --top-p 1.0,0.9 --top-k 50 --budget-s 60 > $G/bench_topk.log 2>&1
echo "bench rc=$?"; grep "| 248320 " $G/bench_topk/bench.md | grep -v "serial\|torch.topk"
tar czf $OUT/next.tgz -C $G .
