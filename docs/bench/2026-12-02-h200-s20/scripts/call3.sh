#!/usr/bin/env bash
# Twentieth session, call 3: the final tree (candidates solved by one sort up to SEARCH_CHUNK = 256 at 4 warps, the
# threshold's block maxima in registers in 3 rounds) against `base` = scratch/s19 = `git archive 7664d86
# replay_kernels`; `w8`: the solve at 8 warps; `g2`: the gather reading 4,096 lanes a program in two tiles of 2,048,
# both loads issued first (90 registers, 5 programs an SM against 64 and 8). Then the top-k bench with the peers
# (the same command as the nineteenth session's call 4) and the GPU tests.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s20/scripts/call3.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c3; mkdir -p $G
timeout 190 python3 tools/ab_kernels.py --kernels --steps 2 \
  --cases "Qwen2.5-derived top-k,SmolLM2-derived top-k,SYNTHETIC top-k 50 + top-p 0.9 R=,SYNTHETIC top-k 50 R=64" \
  --variant base=scratch/s19/replay_kernels --variant tree=replay_kernels \
  --variant w8=replay_kernels --set "w8:topk_gather.SOLVE_WARPS=8" \
  --variant g2=replay_kernels --set "g2:topk_gather.GATHER_SPAN=4096" --set "g2:topk_gather.GATHER_TILES=2" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c3.tgz -C $G .
pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
timeout 120 env PYTHONPATH=/tmp/site:$PWD python3 tools/bench_kernels.py --out $G/bench_topk --vocab 248320 \
  --cases plain --top-p 1.0,0.9 --top-k 50 --budget-s 45 > $G/bench_topk.log 2>&1
echo "bench rc=$?"; grep "checks" $G/bench_topk/bench.md; grep "| 248320 " $G/bench_topk/bench.md | grep -v "serial\|torch.topk"
tar czf $OUT/c3.tgz -C $G .
timeout 200 python3 -m pytest -q -m gpu --durations=4 tests/test_topk_gather.py tests/test_kernels.py \
  tests/test_sample_check.py tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -7 $G/gpu_tests.txt
tar czf $OUT/c3.tgz -C $G .
