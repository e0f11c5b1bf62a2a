#!/usr/bin/env bash
# Thirty-third session, call 3 (carry scratch: scratch/head = `git archive 9149043 replay_kernels`): a stochastic
# span summed against the draft's value (verify_stats.span_max_sum: per-lane max and sum over tiles of 1,024, one
# block max and one block sum a span, no rescaling; a second pass only when the span's max lies more than 64 from
# x_d) against head (two block reductions and a rescale a tile of 2,048); `w2` = the tree with 2-warp draw programs
# for 8-15 rows; Nsight Compute of the position launches; the committed fixtures and the kernel tests on CUDA.
# run(command="timeout 595 bash docs/bench/2026-12-04-h200-s33/scripts/call3.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
source docs/bench/2026-12-04-h200-s32/scripts/ab.sh
W2="((8, 2048, 8, DRAW_PROGRAMS, False, 64), (16, 512, 2, DRAW_PROGRAMS, True, 96), (64, 512, 1, 2 * DRAW_PROGRAMS, True, 96), (1 << 31, 512, 1, 8192, True, 96))"
ab sums.txt 260 --steps 3 --kernels --variant head=scratch/head/replay_kernels --variant tree=replay_kernels \
  --variant w2=replay_kernels --set "w2:draw.DRAW_SHAPES=$W2" \
  --cases "Qwen2.5-derived verify k=4 R=256,Qwen2.5-derived verify k=4 R=64,SYNTHETIC verify k=4 R=1$,SYNTHETIC verify k=4 R=8$,SYNTHETIC verify k=4 R=32$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC plain R=8$,SYNTHETIC top-p 0.9 R=8$"
timeout 60 ncu --section SpeedOfLight --metrics dram__bytes_read.sum,smsp__inst_executed.sum \
  --kernel-name regex:_position_kernel --launch-skip 4 --launch-count 2 python3 tools/ncu_target.py --impl stochastic \
  --R 256 --k 4 --source fixtures/real-draft-model > $G/ncu_qwen_positions.txt 2>&1
echo "== ncu qwen rc=$?"; grep -E "Duration|DRAM Throughput|Compute \(SM\)|inst_executed" $G/ncu_qwen_positions.txt
timeout 60 ncu --section SpeedOfLight --metrics dram__bytes_read.sum,smsp__inst_executed.sum \
  --kernel-name regex:_position_kernel --launch-skip 4 --launch-count 1 python3 tools/ncu_target.py --impl stochastic \
  --R 256 --k 4 > $G/ncu_synth_positions.txt 2>&1
echo "== ncu synthetic rc=$?"; grep -E "Duration|DRAM Throughput|Compute \(SM\)|inst_executed" $G/ncu_synth_positions.txt
timeout 100 python3 -m replay_harness.cli run fixtures/*/ --impl stochastic --against reference --device cuda > $G/fixtures_cuda.txt 2>&1
echo "== fixtures on CUDA rc=$?"; tail -3 $G/fixtures_cuda.txt
left=$((590 - SECONDS)); [ $left -gt 15 ] || exit 0
timeout $left python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels.py tests/test_ex2.py > $G/gpu_tests.txt 2>&1
echo "== gpu tests rc=$?"; tail -3 $G/gpu_tests.txt
