#!/usr/bin/env bash
# Twenty-sixth session, call 2: A/B of the tree against `tok` (tokspan.patch: the first draw recounts the lanes
# at the row's top only when the drawn token lies in the one span holding it), `resid` (s25's
# residual_held_once.patch), `rt` (both: resid_tokspan.patch), `o41` / `o31` (the open-row launch with 41 / 31
# programs a row instead of 61 for up to 8 expected open rows: 12 / 16 slots instead of 8). Tokens compared.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s26/scripts/call2.sh")
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=docs/bench/2026-12-03-h200-s26/scripts; G=$OUT/call2; mkdir -p $G
for v in tok rt; do rm -rf scratch/$v && mkdir -p scratch/$v && cp -r replay_kernels scratch/$v/; done
(cd scratch/tok && patch -p0 < ../../$S/tokspan.patch)
(cd scratch/rt && patch -p0 < ../../$S/resid_tokspan.patch)
rm -rf scratch/resid && mkdir -p scratch/resid && cp -r replay_kernels scratch/resid/ && \
  (cd scratch/resid && patch -p1 < ../../docs/bench/2026-12-03-h200-s25/scripts/residual_held_once.patch)
timeout 560 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=256$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,Qwen2.5-derived top-p 0.9 R=64$" \
  --variant tree=replay_kernels --variant tok=scratch/tok/replay_kernels --variant resid=scratch/resid/replay_kernels \
  --variant rt=scratch/rt/replay_kernels --variant o41=replay_kernels --variant o31=replay_kernels \
  --set "o41:open_rows.OPEN_ROW_SHAPES=((3.0, 122, 168), (8.0, 41, 128))" \
  --set "o31:open_rows.OPEN_ROW_SHAPES=((3.0, 122, 168), (8.0, 31, 128))" 2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab.txt | head -20; grep "^\*" $G/ab.txt | head -40
