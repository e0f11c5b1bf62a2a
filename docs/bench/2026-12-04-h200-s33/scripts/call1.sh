#!/usr/bin/env bash
# Thirty-third session, call 1 (carry scratch: scratch/b9b = `git archive 9b062f2 replay_kernels`, the kernels before
# the thirty-second session's PDL rule and held_top helper):
#  A. the tree against 9b062f2 (the thirty-second session's change with its held_top helper, timed whole) and
#     against `fused` = the tree with every verify in one position launch (stochastic.FUSED_BELOW = 2^30): the
#     Qwen2.5-derived verify steps accept every draft (reference: counts 5 of 5 in all 256 requests), so the four
#     position launches read every row anyway;
#  B. the GPU test of the PDL trigger (PTX of the early and the late build);
#  C. Nsight Compute of the four position launches at Qwen2.5-derived verify k=4 R=256;
#  D. the draw's shape for 8-15 rows (the thirty-second session's prepared race: 2,048 / 4,096 programs, 2 warps);
#  E. Nsight Compute of the verify R=8 draw.
# run(command="timeout 595 bash docs/bench/2026-12-04-h200-s33/scripts/call1.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call1; mkdir -p $G
source docs/bench/2026-12-04-h200-s32/scripts/ab.sh
ab fused.txt 230 --steps 3 --kernels --variant tree=replay_kernels --variant base=scratch/b9b/replay_kernels \
  --variant fused=replay_kernels --set "fused:stochastic.FUSED_BELOW=1 << 30" \
  --cases "Qwen2.5-derived verify k=4 R=256,Qwen2.5-derived verify k=4 R=64,Qwen2.5-derived plain R=256,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-p 0.9 R=64$"
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_launches.py > $G/gpu_launches.txt 2>&1
echo "== gpu test_launches rc=$?"; tail -2 $G/gpu_launches.txt
timeout 80 ncu --section SpeedOfLight --metrics dram__bytes_read.sum,smsp__inst_executed.sum --kernel-name regex:_position_kernel \
  --launch-skip 4 --launch-count 4 python3 tools/ncu_target.py --impl stochastic --R 256 --k 4 \
  --source fixtures/real-draft-model > $G/ncu_qwen_positions.txt 2>&1
echo "== ncu positions rc=$?"; grep -E "_position_kernel|Duration|Throughput|dram__bytes|inst_executed" $G/ncu_qwen_positions.txt | head -40
T="((8, 2048, 8, DRAW_PROGRAMS, False, 64), (16, 512, %s, %s, True, 96), (64, 512, 1, 2 * DRAW_PROGRAMS, True, 96), (1 << 31, 512, 1, 8192, True, 96))"
left=$((585 - SECONDS)); [ $left -gt 150 ] && left=150
ab r8.txt $left --steps 3 --kernels --variant tree=replay_kernels --variant p2k=replay_kernels \
  --variant p4k=replay_kernels --variant w2=replay_kernels \
  --set "p2k:draw.DRAW_SHAPES=$(printf "$T" 1 "2 * DRAW_PROGRAMS")" --set "p4k:draw.DRAW_SHAPES=$(printf "$T" 1 "4 * DRAW_PROGRAMS")" \
  --set "w2:draw.DRAW_SHAPES=$(printf "$T" 2 DRAW_PROGRAMS)" \
  --cases "SYNTHETIC plain R=8$,SYNTHETIC verify k=4 R=8$,SYNTHETIC top-p 0.9 R=8$"
left=$((590 - SECONDS)); [ $left -gt 15 ] || exit 0
timeout $left ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --kernel-name regex:_draw_kernel \
  --launch-skip 2 --launch-count 1 python3 tools/ncu_target.py --impl stochastic --R 8 --k 4 > $G/ncu_draw_r8.txt 2>&1
echo "== ncu draw rc=$?"; grep -E "Duration|Throughput|Achieved Occupancy|Registers" $G/ncu_draw_r8.txt | head -12
