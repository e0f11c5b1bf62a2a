#!/usr/bin/env bash
# Thirty-third session, call 2 (carry scratch: scratch/head = `git archive 9149043 replay_kernels`): the position
# stats by lanes (verify_stats.lane_online: each thread keeps its own running max and sum over a span's tiles, one
# block max and one block sum a span instead of two a tile) against head; `w2` = the tree with 2-warp draw programs
# for 8-15 rows (call 1: plain R=8 13.6 -> 12.8, top-p R=8 26.0 -> 23.3, verify R=8 26.9 -> 25.3); Nsight Compute
# of the position launches (Qwen2.5-derived R=256, SYNTHETIC R=256); the committed fixtures on CUDA.
# run(command="timeout 595 bash docs/bench/2026-12-04-h200-s33/scripts/call2.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
source docs/bench/2026-12-04-h200-s32/scripts/ab.sh
W2="((8, 2048, 8, DRAW_PROGRAMS, False, 64), (16, 512, 2, DRAW_PROGRAMS, True, 96), (64, 512, 1, 2 * DRAW_PROGRAMS, True, 96), (1 << 31, 512, 1, 8192, True, 96))"
ab lanes.txt 300 --steps 3 --kernels --variant head=scratch/head/replay_kernels --variant tree=replay_kernels \
  --variant w2=replay_kernels --set "w2:draw.DRAW_SHAPES=$W2" \
  --cases "Qwen2.5-derived verify k=4 R=256,Qwen2.5-derived verify k=4 R=64,SYNTHETIC verify k=4 R=1$,SYNTHETIC verify k=4 R=8$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC plain R=8$,SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-k 50 R=8$"
for v in head tree; do
  P=$PWD; [ $v = head ] && P=$PWD/scratch/head:$PWD
  timeout 70 env PYTHONPATH=$P ncu --section SpeedOfLight --metrics dram__bytes_read.sum,smsp__inst_executed.sum \
    --kernel-name regex:_position_kernel --launch-skip 4 --launch-count 2 python3 tools/ncu_target.py --impl stochastic \
    --R 256 --k 4 --source fixtures/real-draft-model > $G/ncu_qwen_positions_$v.txt 2>&1
  echo "== ncu qwen $v rc=$?"; grep -E "Duration|DRAM Throughput|Compute \(SM\)|inst_executed" $G/ncu_qwen_positions_$v.txt
  timeout 70 env PYTHONPATH=$P ncu --section SpeedOfLight --metrics dram__bytes_read.sum,smsp__inst_executed.sum \
    --kernel-name regex:_position_kernel --launch-skip 4 --launch-count 1 python3 tools/ncu_target.py --impl stochastic \
    --R 256 --k 4 > $G/ncu_synth_positions_$v.txt 2>&1
  echo "== ncu synthetic $v rc=$?"; grep -E "Duration|DRAM Throughput|Compute \(SM\)|inst_executed" $G/ncu_synth_positions_$v.txt
done
left=$((590 - SECONDS)); [ $left -gt 15 ] || exit 0
timeout $left python3 -m replay_harness.cli run fixtures/*/ --impl stochastic --against reference --device cuda > $G/fixtures_cuda.txt 2>&1
echo "== fixtures on CUDA rc=$?"; tail -3 $G/fixtures_cuda.txt
