#!/usr/bin/env bash
# Nineteenth session, call 4: gathered rows that do not fit solved by one program a row when no row is searched from
# the start (topk_gather.ROW_SOLVE; `nors`: the filter passes, as before), masked rows gathered (every finite value a
# candidate). `base` = scratch/s18 = `git archive d4e9a88 replay_kernels`. Then the GPU tests and the top-k bench.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s19/scripts/call4.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c4; mkdir -p $G
timeout 200 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "top-k 50 + top-p 0.9,top-k 50 R=8,top-k 50 R=64,top-k 50 R=256,verify k=4 top-k 50 R=64,SYNTHETIC plain R=256" \
  --variant base=scratch/s18/replay_kernels --variant tree=replay_kernels \
  --variant nors=replay_kernels --set "nors:topk_gather.ROW_SOLVE=False" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c4.tgz -C $G .
timeout 160 python3 -m pytest -q -m gpu tests/test_topk_gather.py tests/test_kernels.py tests/test_sample_check.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
tar czf $OUT/c4.tgz -C $G .
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 110 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_topk --vocab 248320 \
  --cases plain --top-p 1.0,0.9 --top-k 50 --budget-s 45 > $G/bench_topk.log 2>&1
echo "bench rc=$?"; grep "checks" $G/bench_topk/bench.md; grep "| 248320 " $G/bench_topk/bench.md | grep -v "serial\|torch.topk"
tar czf $OUT/c4.tgz -C $G .
