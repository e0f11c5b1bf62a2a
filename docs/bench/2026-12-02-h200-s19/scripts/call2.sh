#!/usr/bin/env bash
# Nineteenth session, call 2: gathered rows drawn from their candidates (topk_gather.CandidateDraw) and the top-k-alone
# rule by step size (plain.CHECK_TOP_K_BELOW). `base` = scratch/s18 = `git archive d4e9a88 replay_kernels` (before);
# `tree` = the working tree (CHECK_TOP_K_BELOW 8); `g` / `c`: the tree with top-k alone always gathered / always checked.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s19/scripts/call2.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c2; mkdir -p $G
timeout 240 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "top-k 50,SYNTHETIC plain R=256,SYNTHETIC top-p 0.9 R=64,SYNTHETIC verify k=4 R=64" \
  --variant base=scratch/s18/replay_kernels --variant tree=replay_kernels \
  --variant g=replay_kernels --set "g:plain.CHECK_TOP_K_BELOW=0" \
  --variant c=replay_kernels --set "c:plain.CHECK_TOP_K_BELOW=1 << 31" 2>&1 | grep -v -i warn > $G/ab_draw.txt
echo "ab rc=$?"; grep "^|" $G/ab_draw.txt
tar czf $OUT/c2.tgz -C $G .
timeout 150 python3 -m pytest -q -m gpu tests/test_topk_gather.py tests/test_kernels.py tests/test_sample_check.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 150 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_topk --vocab 248320 \
  --cases plain --top-p 1.0,0.9 --top-k 50 --budget-s 60 > $G/bench_topk.log 2>&1
echo "bench rc=$?"; grep "| 248320 " $G/bench_topk/bench.md | grep -v "serial\|torch.topk"
tar czf $OUT/c2.tgz -C $G .
