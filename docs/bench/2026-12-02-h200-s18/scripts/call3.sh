#!/usr/bin/env bash
# Eighteenth session, call 3: the gather with per-lane slots (2,048-lane programs), the first search chunk held in
# registers, and process_loaded's division skipped at temperature 1 on rows with a bound. scratch/tree = 3cba673.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c3; mkdir -p $G
timeout 150 python3 -m pytest -q -m gpu tests/test_topk_gather.py tests/test_kernels.py tests/test_sample_check.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
tar czf $OUT/c3.tgz -C $G .
timeout 240 python3 tools/ab_kernels.py --kernels --steps 5 --cases "top-k,SYNTHETIC verify k=4 R=64,SYNTHETIC plain R=256" \
  --variant base=scratch/tree/replay_kernels --variant tree=replay_kernels \
  --variant s64=replay_kernels --set "s64:topk_gather.SEARCH_CHUNK=64" \
  --variant t256=replay_kernels --set "t256:topk_gather.THRESHOLD_CHUNK=256" 2>&1 | grep -v -i warn > $G/ab_gather2.txt
echo "ab rc=$?"; grep "^|\|^\*" $G/ab_gather2.txt
tar czf $OUT/c3.tgz -C $G .
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 130 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_topk --vocab 248320 \
  --cases plain --top-p 0.9 --top-k 50 --budget-s 70 > $G/bench_topk.log 2>&1
echo "bench rc=$?"; grep "PASS\|FAIL" $G/bench_topk/bench.md | head -3; grep "| 248320 " $G/bench_topk/bench.md | grep -v serial
tar czf $OUT/c3.tgz -C $G .
