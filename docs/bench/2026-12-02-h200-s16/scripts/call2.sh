#!/usr/bin/env bash
# Sixteenth session, second device call. The first call (call1.sh) showed the runner-up found by pruning against
# the second best costs peaked rows their pruning (Qwen2.5-derived top-p R=256 85.8 -> 121.4 us). Now: prune
# against max(second, best - RUNNER_UP_MARGIN) and write the runner-up only when no skipped tile could hold it
# (tree: margin 4, CHECK_BLOCK 512). Variants: m2 / m8 (margins 2, 8), c72 (below-8-rows draw capped at 72
# registers: the R = 1 first draw's 40 B of stack gone), base512 (3ad3946 with 512-lane check tiles: the tile
# alone). scratch/base = git archive 3ad3946 replay_kernels.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT; G=/tmp/g; mkdir -p $G/bench
timeout 170 python3 -m pytest -q -m gpu tests/test_kernels.py tests/test_sample_check.py tests/test_launches.py \
  -p no:cacheprovider > $G/gpu_tests.txt 2>&1
rc=$?; echo "gpu tests rc=$rc"; tail -3 $G/gpu_tests.txt
[ $rc -eq 0 ] || { tar czf $R/call2.tgz -C $G .; exit 1; }
timeout 230 python3 tools/ab_kernels.py --kernels --steps 8 \
  --cases "SYNTHETIC top-p 0.9 R=1,top-p 0.9 R=8,SYNTHETIC top-p 0.9 R=64,top-p 0.9 R=256,Qwen2.5-derived top-p,verify k=4 top-p,SYNTHETIC plain R=64" \
  --variant base=scratch/base/replay_kernels --variant tree=replay_kernels \
  --variant m2=replay_kernels --set "m2:draw.RUNNER_UP_MARGIN=tl.constexpr(2.0)" \
  --variant m8=replay_kernels --set "m8:draw.RUNNER_UP_MARGIN=tl.constexpr(8.0)" \
  --variant c72=replay_kernels --set "c72:draw.DRAW_SHAPES=((8, 2048, 8, DRAW_PROGRAMS, False, 72),) + DRAW_SHAPES[1:]" \
  --variant base512=scratch/base/replay_kernels --set "base512:sample_check.CHECK_BLOCK=512" \
  2>&1 | grep -v -i warn > $G/ab_runner_up.txt
echo "ab rc=$?"; grep "^|" $G/ab_runner_up.txt
tar czf $R/call2.tgz -C $G .
OUT=$G/bench timeout 150 bash tools/run_gpu_bench.sh --vocab 248320 --top-p 1.0,0.9 --budget-s 120 \
  > $G/bench/stdout.txt 2>&1; echo "bench rc=$?"
grep -A16 "^| R | k" $G/bench/stdout.txt | head -40
tar czf $R/call2.tgz -C $G .
