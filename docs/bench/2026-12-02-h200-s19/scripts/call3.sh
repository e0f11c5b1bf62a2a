#!/usr/bin/env bash
# Nineteenth session, call 3: the threshold searched from the smallest finite block maximum in THRESHOLD_ROUNDS
# rounds (4; `r8`, `r3`), the solve by ranks for rows of at most 64 candidates (RANK_SOLVE; `norank`: the searches),
# the gathered rows' fallback search with one program along rows (GATHER_SEARCH_ROWS 1; `s8`: 8). `base` =
# scratch/s18 = `git archive d4e9a88 replay_kernels`. Then the GPU tests, the top-k bench against FlashInfer and
# ncu of the gather's launches on a top-k + top-p step (R = 256).
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s19/scripts/call3.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c3; mkdir -p $G
timeout 230 python3 tools/ab_kernels.py --kernels --steps 5 \
  --cases "top-k 50,SYNTHETIC plain R=256,SYNTHETIC verify k=4 R=64" \
  --variant base=scratch/s18/replay_kernels --variant tree=replay_kernels \
  --variant r8=replay_kernels --set "r8:topk_gather.THRESHOLD_ROUNDS=8" \
  --variant r3=replay_kernels --set "r3:topk_gather.THRESHOLD_ROUNDS=3" \
  --variant norank=replay_kernels --set "norank:topk_gather.RANK_SOLVE=False" \
  --variant s8=replay_kernels --set "s8:params.GATHER_SEARCH_ROWS=8" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c3.tgz -C $G .
timeout 150 python3 -m pytest -q -m gpu tests/test_topk_gather.py tests/test_kernels.py tests/test_sample_check.py \
  tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -2 $G/gpu_tests.txt
tar czf $OUT/c3.tgz -C $G .
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 120 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_topk --vocab 248320 \
  --cases plain --top-p 1.0,0.9 --top-k 50 --budget-s 50 > $G/bench_topk.log 2>&1
echo "bench rc=$?"; grep "| 248320 " $G/bench_topk/bench.md | grep -v "serial\|torch.topk"
tar czf $OUT/c3.tgz -C $G .
for k in _block_max_kernel _threshold_kernel _gather_kernel _solve_kernel _draw_kernel; do
  timeout 45 ncu --section SpeedOfLight --kernel-name regex:$k --launch-skip 2 --launch-count 1 \
    python3 tools/ncu_target.py --impl gumbel-max --R 256 --top-p 0.9 --top-k 50 > $G/ncu_$k.txt 2>&1
  echo "ncu $k rc=$?"; grep -E "Duration|DRAM Throughput|Compute \(SM\)" $G/ncu_$k.txt
done
tar czf $OUT/c3.tgz -C $G .
