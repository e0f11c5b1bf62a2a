#!/usr/bin/env bash
# SCRATCH (eleventh session): verify R=64 levers: position register caps, draw programs from 64 rows.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T='((8, 2048, 8, DRAW_PROGRAMS, False, 64), (16, 512, 1, DRAW_PROGRAMS, True, None), (64, 512, 1, 2 * DRAW_PROGRAMS, True, None), (1 << 31, 512, 1, NPROG, True, None))'
timeout 400 python3 tools/ab_kernels.py --kernels --cases verify,plain --variant tree=replay_kernels \
  --variant pm48=replay_kernels --variant pm64=replay_kernels --variant d4096=replay_kernels --variant d16k=replay_kernels \
  --set 'pm48:stochastic.POSITION_MAXNREG=48' --set 'pm64:stochastic.POSITION_MAXNREG=64' \
  --set "d4096:draw.DRAW_SHAPES=${T/NPROG/4096}" --set "d16k:draw.DRAW_SHAPES=${T/NPROG/16384}" 2>&1 | grep -v -i warn | tee $OUT/ab4.txt
