#!/usr/bin/env bash
# Twentieth session, call 2: the solve of rows of at most SEARCH_CHUNK candidates by one sort of (key, id) instead of
# ranks ([64, 64] compares): real-derived rows have 70-150 candidates (ties), so every one went to the 16-way searches
# (22-28 us of solve at R = 64, call 1). `tree` = the sort at 64 candidates and 4 warps, the threshold's block maxima
# all in registers (THRESHOLD_CHUNK 1024, 8 warps: call 1's `t1k8`); `s128` / `s256`: the sort up to 128 / 256
# candidates at 8 warps (`s256w4`: 4 warps); `r3`: s256 with the threshold in 3 rounds. `base` = scratch/s19.
# Then the GPU tests (after the A/B: Triton's cache warm; call 1 ran them cold and they passed 150 s).
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s20/scripts/call2.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c2; mkdir -p $G
S="topk_gather.SEARCH_CHUNK"; W="topk_gather.SOLVE_WARPS"
timeout 250 python3 tools/ab_kernels.py --kernels --steps 3 --cases "top-k 50 + top-p 0.9,SYNTHETIC top-k 50 R=64" \
  --variant base=scratch/s19/replay_kernels --variant tree=replay_kernels \
  --variant s128=replay_kernels --set "s128:$S=128" --set "s128:$W=8" \
  --variant s256=replay_kernels --set "s256:$S=256" --set "s256:$W=8" \
  --variant s256w4=replay_kernels --set "s256w4:$S=256" \
  --variant r3=replay_kernels --set "r3:$S=256" --set "r3:$W=8" --set "r3:topk_gather.THRESHOLD_ROUNDS=3" \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep "^|" $G/ab.txt
tar czf $OUT/c2.tgz -C $G .
timeout 280 python3 -m pytest -q -m gpu --durations=8 tests/test_topk_gather.py tests/test_kernels.py \
  tests/test_sample_check.py tests/test_launches.py -p no:cacheprovider > $G/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; tail -12 $G/gpu_tests.txt
tar czf $OUT/c2.tgz -C $G .
