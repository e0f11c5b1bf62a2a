#!/usr/bin/env bash
# Eighteenth session, call 4 (final tree: SEARCH_CHUNK 64, THRESHOLD_CHUNK 256): GPU test of the gather, the top-k
# bench against FlashInfer, ncu of the gather's two passes and of the draw on a top-k + top-p step (R = 256).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c4; mkdir -p $G
timeout 60 python3 -m pytest -q -m gpu tests/test_topk_gather.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 200 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_topk --vocab 248320 \
  --cases plain --top-p 1.0,0.9 --top-k 50 --budget-s 100 > $G/bench_topk.log 2>&1
echo "bench rc=$?"; grep "PASS\|FAIL" $G/bench_topk/bench.md | head -3; grep "| 248320 " $G/bench_topk/bench.md | grep -v "serial\|torch.topk"
tar czf $OUT/c4.tgz -C $G .
for k in _block_max_kernel _gather_kernel _draw_kernel; do
  timeout 60 ncu --section SpeedOfLight --kernel-name regex:$k --launch-skip 2 --launch-count 1 \
    python3 tools/ncu_target.py --impl gumbel-max --R 256 --top-p 0.9 --top-k 50 > $G/ncu_$k.txt 2>&1
  echo "ncu $k rc=$?"; grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)" $G/ncu_$k.txt
done
tar czf $OUT/c4.tgz -C $G .
