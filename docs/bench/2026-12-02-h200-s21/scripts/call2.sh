#!/usr/bin/env bash
# Twenty-first session, call 2: the shapes of sample-and-check's later rounds (the list draws over the rows still
# open after a check), last measured in the eighth session on much older kernels. Module constants only (`--set`):
# a draw's token does not depend on its split, so tokens must be equal in every cell.
#   s8 / s16: each open row split as a draw of 8 / 16 rows (one / two 2048-lane tiles a program, not four)
#   w1: one-warp 512-lane programs (the first draw's shape from 16 rows), each row split as a draw of 4 rows
#   slot4: 4 requests a slot of the list grid (not 8)
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s21/scripts/call2.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c2; mkdir -p $G
timeout 400 python3 tools/ab_kernels.py --kernels --steps 3 \
  --cases "SYNTHETIC top-p 0.9 R=1,SYNTHETIC top-p 0.5 R=1,SYNTHETIC top-p 0.9 R=8,SYNTHETIC top-p 0.9 R=64,SYNTHETIC top-p 0.9 R=256,Qwen2.5-derived top-p 0.9 R=64,verify k=4 top-p 0.9 R=64" \
  --variant base=replay_kernels \
  --variant s8=replay_kernels --set "s8:sample_check.ROUND_SPLIT_AS_ROWS=8" \
  --variant s16=replay_kernels --set "s16:sample_check.ROUND_SPLIT_AS_ROWS=16" \
  --variant w1=replay_kernels --set "w1:sample_check.ROUND_DRAW_SHAPES=((1 << 31, 512, 1, 1024, True, 96),)" \
  --set "w1:sample_check.ROUND_SPLIT_AS_ROWS=4" \
  --variant slot4=replay_kernels --set "slot4:sample_check.ROWS_PER_SLOT=4" 2>&1 | grep -v -i warn > $G/ab_rounds.txt
echo "ab rc=$?"; grep "^|" $G/ab_rounds.txt
tar czf $OUT/c2.tgz -C $G .
