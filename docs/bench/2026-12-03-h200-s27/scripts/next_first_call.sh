#!/usr/bin/env bash
# Prepared for the twenty-eighth session's first GPU call (not run yet): the filter loop's pending steps. The tree
# (8 slots of 16 programs, 255 registers) against redund (scripts/redundant_steps.patch applied to a copy: the
# later steps run by every program, no barrier after them) and cap (LOOP_MAXNREG = 128: two programs an SM, 8 slots
# of 31) and settle (scripts/settle_once.patch: each round's interval settled once a program, not once a span: 228
# registers, no stack), per step at R = 64 (12 steps: steps 5 and 11 list rows) and R = 256 (4 steps).
#   for v in redund:redundant_steps settle:settle_once; do mkdir -p scratch/${v%%:*} && git archive HEAD replay_kernels \
#     | tar x -C scratch/${v%%:*} && (cd scratch/${v%%:*} && patch -p1 < ../../docs/bench/2026-12-03-h200-s27/scripts/${v##*:}.patch); done
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s27/scripts/next_first_call.sh", carry=["scratch/redund", "scratch/settle"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/next1; mkdir -p $G
timeout 300 python3 tools/ab_kernels.py --kernels --per-step --steps 12 --cases "SYNTHETIC verify k=4 top-p 0.9 R=64$" \
  --variant tree=replay_kernels --variant redund=scratch/redund/replay_kernels --variant cap=replay_kernels \
  --variant settle=scratch/settle/replay_kernels \
  --set "cap:filter_loop.LOOP_MAXNREG=128" 2>&1 | grep -v -i warn > $G/ab64.txt
echo "ab64 rc=$?"; grep -E "^\||DIFFER" $G/ab64.txt; grep "rows listed: " $G/ab64.txt | grep -v " 0 rows"
timeout 200 python3 tools/ab_kernels.py --kernels --per-step --steps 4 --cases "SYNTHETIC verify k=4 top-p 0.9 R=256$" \
  --variant tree=replay_kernels --variant redund=scratch/redund/replay_kernels --variant cap=replay_kernels \
  --variant settle=scratch/settle/replay_kernels \
  --set "cap:filter_loop.LOOP_MAXNREG=128" 2>&1 | grep -v -i warn > $G/ab256.txt
echo "ab256 rc=$?"; grep -E "^\||DIFFER|^\*" $G/ab256.txt | head -12
