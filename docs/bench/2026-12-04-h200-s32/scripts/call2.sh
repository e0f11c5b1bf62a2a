#!/usr/bin/env bash
# Thirty-second session, call 2 (carry scratch; make_variants.sh first): where programmatic dependent launch costs
# time (call 1: verify k=4 R=8 32.3 us with PDL, 27.4 without). Variants: the tree, the tree without PDL, `late`
# (no explicit trigger: the next kernel starts as this one's programs exit), PDL off for the position launches only
# (`nopos`) or for the draw only (`nodraw`). Then the rounds path's held-top patch again at top-p R=256, 20 steps.
# run(command="timeout 590 bash docs/bench/2026-12-04-h200-s32/scripts/call2.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
source docs/bench/2026-12-04-h200-s32/scripts/ab.sh
ab pdl_verify.txt 170 --steps 10 --variant tree=replay_kernels --variant nopdl=replay_kernels --variant late=scratch/late/replay_kernels \
  --variant nopos=scratch/perk/replay_kernels --variant nodraw=scratch/perk/replay_kernels --set "nopdl:launches.PDL=False" \
  --set "nopos:launches.PDL_OFF={'_position_kernel'}" --set "nodraw:launches.PDL_OFF={'_draw_kernel'}" \
  --cases "SYNTHETIC verify k=4 R=1$,SYNTHETIC verify k=4 R=8$,SYNTHETIC verify k=4 R=32$,SYNTHETIC verify k=4 R=64$"
ab pdl_sample.txt 170 --steps 6 --variant tree=replay_kernels --variant nopdl=replay_kernels --variant late=scratch/late/replay_kernels \
  --set "nopdl:launches.PDL=False" --cases "SYNTHETIC plain R=1$,SYNTHETIC plain R=8$,SYNTHETIC plain R=64$,SYNTHETIC top-p 0.9 R=1$,SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC verify k=4 top-p 0.9 R=8$"
rm -rf scratch/rheld && mkdir -p scratch/rheld && cp -r replay_kernels scratch/rheld/ \
  && patch -s -d scratch/rheld -p1 < docs/bench/2026-12-04-h200-s31/scripts/rounds_held.patch || exit 1
ab rheld.txt 120 --steps 20 --variant tree=replay_kernels --variant rheld=scratch/rheld/replay_kernels \
  --cases "SYNTHETIC top-p 0.9 R=256$,Qwen2.5-derived top-p 0.9 R=256$,Qwen2.5-derived top-p 0.9 R=64$"
