#!/usr/bin/env bash
# Thirty-third session, call 6 (carry scratch: scratch/a2 = the tree's replay_kernels with span_stats loading two
# tiles ahead for 2-byte logits: a bf16 tile is 4 KB, half an fp32 one, so a program had half the bytes in flight;
# 59 registers, no stack, 8 programs an SM as before; the same sums in the same order): Qwen2.5-derived (bf16) verify
# steps, 5 rounds; tree2 = the tree again.
# run(command="timeout 420 bash docs/bench/2026-12-04-h200-s33/scripts/call6.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call6; mkdir -p $G
source docs/bench/2026-12-04-h200-s32/scripts/ab.sh
ab ahead2.txt 300 --rounds 5 --kernels --variant tree=replay_kernels --variant a2=scratch/a2/replay_kernels \
  --variant tree2=replay_kernels \
  --cases "Qwen2.5-derived verify k=4 R=8,Qwen2.5-derived verify k=4 R=32,Qwen2.5-derived verify k=4 R=64,Qwen2.5-derived verify k=4 R=256,SYNTHETIC verify k=4 R=64$"
