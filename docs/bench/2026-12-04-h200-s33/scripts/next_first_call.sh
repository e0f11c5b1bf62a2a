#!/usr/bin/env bash
# For the next session's first GPU call (carry scratch; about 300 s of device time beyond the start):
#  1. call8.sh: the committed fixtures on CUDA and the GPU tests at this tree (refused in the thirty-third session);
#  2. chain.patch (prepared, interpreter tests pass, not yet timed): the fused position launch on grid (NB, R, P),
#     its tests chained as positions complete (replay_kernels/verify_chain.py), and a position after a test that
#     ended the walk reads nothing. `chain` = the patch at FUSED_BELOW = 32 (the fused launch below 32 requests, as
#     now); `chainall` = the patch with every verify fused (call 1 of the thirty-third session: fused without the
#     skip took Qwen2.5-derived R=256 230.3 -> 221.3 and R=64 88.5 -> 77.2, SYNTHETIC R=64 +21%, R=256 +42%).
# Here first: `bash docs/bench/2026-12-04-h200-s33/scripts/make_variants.sh chain` (scratch/chain: HEAD + chain.patch).
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s33/scripts/next_first_call.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 170 bash docs/bench/2026-12-04-h200-s33/scripts/call8.sh
G=$OUT/first; mkdir -p $G
timeout 300 python3 tools/ab_kernels.py --rounds 5 --kernels --variant tree=replay_kernels --variant chain=scratch/chain/replay_kernels \
  --variant chainall=scratch/chain/replay_kernels --set "chainall:stochastic.FUSED_BELOW=1 << 30" \
  --cases "Qwen2.5-derived verify k=4 R=8,Qwen2.5-derived verify k=4 R=32,Qwen2.5-derived verify k=4 R=64,Qwen2.5-derived verify k=4 R=256,SYNTHETIC verify k=4 R=1$,SYNTHETIC verify k=4 R=8$,SYNTHETIC verify k=4 R=32$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  2>&1 | grep -v -i warn > $G/chain.txt
echo "== ab rc=${PIPESTATUS[0]}"; grep -E "^\||DIFFER|Error|^\* " $G/chain.txt
# 3. The draw's shape further (the 2-warp programs for 8-15 rows took 6-9% off at R = 8; the draw at verify R = 8 is
#    latency-bound: SM 24.9%, DRAM 7.6%): 4 warps (w4), 2 warps in 512 programs (w2p512), and 2-warp programs for
#    16-63 rows too (w2mid).
S="((8, 2048, 8, DRAW_PROGRAMS, False, 64), (16, 512, %s, %s, True, 96), (64, 512, %s, 2 * DRAW_PROGRAMS, True, 96), (1 << 31, 512, 1, 8192, True, 96))"
timeout 150 python3 tools/ab_kernels.py --steps 3 --kernels --variant tree=replay_kernels --variant w4=replay_kernels \
  --variant w2p512=replay_kernels --variant w2mid=replay_kernels \
  --set "w4:draw.DRAW_SHAPES=$(printf "$S" 4 DRAW_PROGRAMS 1)" --set "w2p512:draw.DRAW_SHAPES=$(printf "$S" 2 "DRAW_PROGRAMS // 2" 1)" \
  --set "w2mid:draw.DRAW_SHAPES=$(printf "$S" 2 DRAW_PROGRAMS 2)" \
  --cases "SYNTHETIC plain R=8$,SYNTHETIC plain R=12$,SYNTHETIC verify k=4 R=8$,SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=32$,SYNTHETIC verify k=4 R=32$" \
  2>&1 | grep -v -i warn > $G/draw_shapes.txt
echo "== ab rc=${PIPESTATUS[0]}"; grep -E "^\||DIFFER|Error|^\* " $G/draw_shapes.txt
