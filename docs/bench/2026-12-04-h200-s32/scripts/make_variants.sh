#!/usr/bin/env bash
# The thirty-second session's base variants, from git (run in the repo root before a call; carry scratch).
set -eu
for c in 31becf3 897316a; do
  rm -rf scratch/v$c && mkdir -p scratch/v$c && git archive $c replay_kernels | tar x -C scratch/v$c
done
# Call 2: PDL per kernel. `perk`: launches.py takes PDL_OFF, a set of kernel names launched without PDL (set with
# ab_kernels --set "NAME:launches.PDL_OFF={'_position_kernel'}"); `late`: no explicit trigger after the wait (the
# next kernel's programs start when this kernel's programs exit, not when they all have started).
rm -rf scratch/perk scratch/late && mkdir -p scratch/perk scratch/late
git archive 9b062f2 replay_kernels | tar x -C scratch/perk && git archive 9b062f2 replay_kernels | tar x -C scratch/late
python3 - <<'PY'
p = "scratch/perk/replay_kernels/launches.py"; s = open(p).read()
old = 'if "PDL" in kernel.arg_names and PDL and _pdl_device():'
assert old in s
s = s.replace(old, 'if "PDL" in kernel.arg_names and PDL and _pdl_device() and getattr(kernel, "fn", kernel).__name__ '
              'not in PDL_OFF:').replace("\nPDL = True\n", "\nPDL = True\nPDL_OFF: set = set()\n")
open(p, "w").write(s)
p = "scratch/late/replay_kernels/launches.py"; s = open(p).read()
old = "        gdc_wait()\n        gdc_launch_dependents()\n"
assert old in s
open(p, "w").write(s.replace(old, "        gdc_wait()\n"))
PY
# Call 3: the early trigger per kernel. `head`: 9b062f2's kernels (every PDL kernel triggers at its start); `perl`:
# perl.patch on them (the PDL_EARLY / PDL_LATE trigger; WAVE_RULE: late where a grid holds more programs than the
# device, the call's working tree with WAVE_RULE = True, "wave1"; PDL_LATE_FOR: kernel names that trigger late).
rm -rf scratch/head scratch/perl && mkdir -p scratch/head scratch/perl
git archive 9b062f2 replay_kernels | tar x -C scratch/head
git archive 9b062f2 replay_kernels | tar x -C scratch/perl
patch -s -d scratch/perl -p1 < docs/bench/2026-12-04-h200-s32/scripts/perl.patch
