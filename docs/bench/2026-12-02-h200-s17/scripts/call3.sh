#!/usr/bin/env bash
# Seventeenth session, third device call: the tree = the verify position stats loading one tile ahead, capped at
# 64 registers (p64 of call 2), with the one-warp draw shapes capped at 96 registers (the verify draw: 114 -> 96,
# 16 -> 20 programs an SM, no stack; tools/kernel_resources.py, triton 3.6); the check pass as at HEAD. Against
# HEAD b1d0320 (scratch/head) and the tree with the draw uncapped (unc); then the bench on the tree.
# run(command="timeout 590 bash docs/bench/2026-12-02-h200-s17/scripts/call3.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c3; mkdir -p $G/bench
timeout 260 python3 tools/ab_kernels.py --kernels --steps 5 --cases "verify,plain,SYNTHETIC top-p 0.9 R=64,SYNTHETIC top-p 0.9 R=256" \
  --variant base=scratch/head/replay_kernels --variant tree=replay_kernels \
  --variant unc=replay_kernels --set "unc:draw.DRAW_SHAPES=tuple(s[:5] + (None,) if s[2] == 1 else s for s in DRAW_SHAPES)" \
  2>&1 | grep -v -i warn > $G/ab_tree.txt
echo "ab rc=$?"; grep "^|" $G/ab_tree.txt
tar czf $OUT/c3.tgz -C $G .
OUT=$G/bench timeout 250 bash tools/run_gpu_bench.sh --vocab 248320 --top-p 1.0,0.9 --budget-s 150 \
  > $G/bench/stdout.txt 2>&1; echo "bench rc=$?"
grep -A20 "^| R | k" $G/bench/stdout.txt | head -40
tar czf $OUT/c3.tgz -C $G .
