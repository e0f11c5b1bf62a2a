#!/usr/bin/env bash
# For the next session's first GPU call (carry nothing beyond the tree): verify k=4 R=8 is 26.7 us against vLLM's
# 23.6 (thirty-second session, call 4), and its draw of 8 rows takes 15.0 us of it (call 1, by kernel: 976 one-warp
# programs, 7.4 an SM, latency-bound; the plain draw R=8 13.8). Race the draw's shape for 8-15 rows (draw.DRAW_SHAPES'
# second entry: 1,024 programs of one warp, 512-lane tiles) against 2,048 programs (p2k), 4,096 (p4k) and 2-warp
# programs (w2), plain and verify; then Nsight Compute of that draw at verify R=8.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s32/scripts/next_first_call.sh")
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/first; mkdir -p $G
T="((8, 2048, 8, DRAW_PROGRAMS, False, 64), (16, 512, %s, %s, True, 96), (64, 512, 1, 2 * DRAW_PROGRAMS, True, 96), (1 << 31, 512, 1, 8192, True, 96))"
timeout 300 python3 tools/ab_kernels.py --steps 8 --kernels --variant tree=replay_kernels --variant p2k=replay_kernels \
  --variant p4k=replay_kernels --variant w2=replay_kernels \
  --set "p2k:draw.DRAW_SHAPES=$(printf "$T" 1 "2 * DRAW_PROGRAMS")" --set "p4k:draw.DRAW_SHAPES=$(printf "$T" 1 "4 * DRAW_PROGRAMS")" \
  --set "w2:draw.DRAW_SHAPES=$(printf "$T" 2 DRAW_PROGRAMS)" \
  --cases "SYNTHETIC plain R=8$,SYNTHETIC verify k=4 R=8$,SYNTHETIC top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC top-k 50 R=8$" \
  2>&1 | grep -v -i warn > $G/ab_r8.txt
echo "== ab rc=${PIPESTATUS[0]}"; grep -E "^\||DIFFER|Error|^\* " $G/ab_r8.txt
timeout 200 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --kernel-name regex:_draw_kernel \
  --launch-skip 2 --launch-count 1 python3 tools/ncu_target.py --impl stochastic --R 8 --k 4 > $G/ncu_draw_r8.txt 2>&1
echo "== ncu rc=$?"; grep -E "Duration|Throughput|Achieved Occupancy|Registers" $G/ncu_draw_r8.txt | head -12
