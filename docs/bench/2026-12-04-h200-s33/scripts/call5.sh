#!/usr/bin/env bash
# Thirty-third session, call 5 (carry scratch: scratch/b4k = the tree's replay_kernels with stochastic.STATS_BLOCK =
# 4096, STATS_SPAN = 16384, POSITION_MAXNREG = 80): bf16 position tiles of 4,096 lanes on the Qwen2.5-derived verify
# steps at every batch size (call 4: R=256 229.5 -> 218.0 us, R=64 88.4 -> 91.8), 5 rounds; tree2 = the tree again (the noise between identical kernels).
# run(command="timeout 500 bash docs/bench/2026-12-04-h200-s33/scripts/call5.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call5; mkdir -p $G
source docs/bench/2026-12-04-h200-s32/scripts/ab.sh
ab bf16.txt 300 --rounds 5 --kernels --variant tree=replay_kernels --variant b4k=scratch/b4k/replay_kernels --variant tree2=replay_kernels \
  --cases "Qwen2.5-derived verify k=4 R=8,Qwen2.5-derived verify k=4 R=32,Qwen2.5-derived verify k=4 R=64,Qwen2.5-derived verify k=4 R=256"
