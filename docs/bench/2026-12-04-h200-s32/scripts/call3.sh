#!/usr/bin/env bash
# Thirty-second session, call 3 (carry scratch; make_variants.sh first): which kernel's early trigger costs time at
# R=8 (call 2: verify k=4 R=8 32.1 us with every trigger early, 26.9 with every trigger late; top-p 0.9 R=8 41.3 vs
# 34.1; but late loses 2-4% at R=1 and R=64). Variants: head (9b062f2: early), late (every trigger late), wave1 (the
# working tree then, = perl with WAVE_RULE = True: late where the grid holds more programs than the device),
# l<kernel> (late for that kernel only).
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s32/scripts/call3.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call3; mkdir -p $G
source docs/bench/2026-12-04-h200-s32/scripts/ab.sh
P=scratch/perl/replay_kernels
ab verify.txt 120 --steps 6 --variant head=scratch/head/replay_kernels --variant late=scratch/late/replay_kernels \
  --variant wave1=$P --set "wave1:launches.WAVE_RULE=True" --variant lpos=$P --variant ldraw=$P --set "lpos:launches.PDL_LATE_FOR={'_position_kernel'}" \
  --set "ldraw:launches.PDL_LATE_FOR={'_draw_kernel'}" --cases "SYNTHETIC verify k=4 R=8$,SYNTHETIC verify k=4 R=64$"
ab topp.txt 150 --steps 6 --variant head=scratch/head/replay_kernels --variant late=scratch/late/replay_kernels \
  --variant wave1=$P --set "wave1:launches.WAVE_RULE=True" --variant ldraw=$P --variant lcheck=$P --variant lopen=$P \
  --set "ldraw:launches.PDL_LATE_FOR={'_draw_kernel'}" --set "lcheck:launches.PDL_LATE_FOR={'_check_kernel'}" \
  --set "lopen:launches.PDL_LATE_FOR={'_open_rows_kernel'}" --cases "SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-p 0.9 R=64$"
ab sweep.txt 230 --steps 5 --variant head=scratch/head/replay_kernels --variant late=scratch/late/replay_kernels \
  --variant wave1=$P --set "wave1:launches.WAVE_RULE=True" --cases "SYNTHETIC plain R=1$,SYNTHETIC plain R=256$,SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.9 R=4$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=32$,SYNTHETIC top-p 0.9 R=256$,SYNTHETIC verify k=4 R=1$,SYNTHETIC verify k=4 R=32$,SYNTHETIC verify k=4 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC top-k 50 R=8$,SYNTHETIC top-k 50 + top-p 0.9 R=64$"
