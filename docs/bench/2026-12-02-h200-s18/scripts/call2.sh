#!/usr/bin/env bash
# Eighteenth session, call 2: the gathered top-k bounds (replay_kernels/topk_gather.py) on the GPU.
# scratch/tree = `git archive 3cba673 replay_kernels` (the search for every top-k row); replay_kernels = the tree.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s18/scripts/call2.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c2; mkdir -p $G
timeout 150 python3 -m pytest -q -m gpu tests/test_topk_gather.py tests/test_kernels.py tests/test_sample_check.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
tar czf $OUT/c2.tgz -C $G .
timeout 220 python3 tools/ab_kernels.py --kernels --steps 5 --cases "top-k" \
  --variant base=scratch/tree/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i warn > $G/ab_gather.txt
echo "ab rc=$?"; grep "^|\|^\*" $G/ab_gather.txt
tar czf $OUT/c2.tgz -C $G .
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 150 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_topk --vocab 248320 \
  --cases plain --top-p 1.0,0.9 --top-k 50 --budget-s 90 > $G/bench_topk.log 2>&1
echo "bench rc=$?"; grep -i "top-k\|PASS\|FAIL" $G/bench_topk/*.md | head -30
tar czf $OUT/c2.tgz -C $G .
