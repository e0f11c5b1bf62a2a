#!/usr/bin/env bash
# Thirty-third session, call 4 (carry scratch: scratch/head = `git archive 9149043 replay_kernels`; scratch/b4k = the
# same with stochastic.STATS_BLOCK = 4096, STATS_SPAN = 16384): the tree (2-warp draw programs for 8-15 rows) against
# head; bf16 position tiles of 4,096 lanes (8 KB a tile, as fp32's 2,048: a bf16 program has half the bytes in flight
# of an fp32 one; Qwen2.5-derived position launches at 44% of DRAM against 72% for fp32 rows), cap 80 registers (74
# used, 6 programs an SM), spans of 16,384 (b4k) or 8,192 (b4k2); the fixtures and GPU tests on the tree.
# run(command="timeout 595 bash docs/bench/2026-12-04-h200-s33/scripts/call4.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call4; mkdir -p $G
source docs/bench/2026-12-04-h200-s32/scripts/ab.sh
ab tiles.txt 250 --steps 3 --kernels --variant head=scratch/head/replay_kernels --variant tree=replay_kernels \
  --variant b4k=scratch/b4k/replay_kernels --variant b4k2=scratch/b4k/replay_kernels \
  --set "b4k:stochastic.POSITION_MAXNREG=80" --set "b4k2:stochastic.POSITION_MAXNREG=80" --set "b4k2:stochastic.STATS_SPAN=8192" \
  --cases "Qwen2.5-derived verify k=4 R=256,Qwen2.5-derived verify k=4 R=64,SYNTHETIC verify k=4 R=8$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,SYNTHETIC plain R=8$,SYNTHETIC top-p 0.9 R=8$,SYNTHETIC plain R=12$"
timeout 170 python3 -m replay_harness.cli run fixtures/*/ --impl stochastic --against reference --device cuda > $G/fixtures_cuda.txt 2>&1
echo "== fixtures on CUDA rc=$?"; tail -4 $G/fixtures_cuda.txt
left=$((590 - SECONDS)); [ $left -gt 15 ] || exit 0
timeout $left python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_launches.py tests/test_one_launch.py \
  "tests/test_kernels.py::test_stochastic_span_sums_far_from_the_draft_value" \
  > $G/gpu_tests.txt 2>&1
echo "== gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
