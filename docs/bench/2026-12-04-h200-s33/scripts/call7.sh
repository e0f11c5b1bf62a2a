#!/usr/bin/env bash
# Thirty-third session, call 7 (carry scratch: scratch/pre = the tree's replay_kernels before the hoist): a position
# program loads its span's first tile, the row's temperature and filter bound together with the draft token instead
# of after it (one dependent round trip less before the span's bytes flow; launches without top-p bounds), against
# pre; pre2 = pre again. Same sums, same tokens.
# run(command="timeout 300 bash docs/bench/2026-12-04-h200-s33/scripts/call7.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call7; mkdir -p $G
source docs/bench/2026-12-04-h200-s32/scripts/ab.sh
ab hoist.txt 250 --rounds 5 --kernels --variant pre=scratch/pre/replay_kernels --variant hoist=replay_kernels \
  --variant pre2=scratch/pre/replay_kernels \
  --cases "Qwen2.5-derived verify k=4 R=8,Qwen2.5-derived verify k=4 R=32,Qwen2.5-derived verify k=4 R=64,Qwen2.5-derived verify k=4 R=256,SYNTHETIC verify k=4 R=1$,SYNTHETIC verify k=4 R=8$,SYNTHETIC verify k=4 R=64$,SYNTHETIC verify k=4 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=64$"
