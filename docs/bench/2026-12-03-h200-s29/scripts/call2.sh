#!/usr/bin/env bash
# Twenty-ninth session, call 2: each open-row redraw floored anew after a miss (one_launch.floor_of under the
# miss's bound), against base (scratch/s29base = git archive 4d82581); the open-row shapes raced with --set:
# p31 / p41: 31 or 41 programs a row from 3 expected open (16 / 12 slots: no slot takes two rows); s61: 61 programs
# (8 slots) from the first request instead of 122 (3 slots). GPU tests of the open rows first.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s29/scripts/call2.sh", carry=["scratch/s29base"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
timeout 100 python3 -m pytest -q -m gpu tests/test_one_launch.py -k "open_rows" -p no:cacheprovider > $G/gpu_test_open_rows.txt 2>&1
echo "gpu open rows tests rc=$? $(tail -1 $G/gpu_test_open_rows.txt)"
V="--variant base=scratch/s29base/replay_kernels --variant tree=replay_kernels --variant p31=replay_kernels --variant p41=replay_kernels --variant s61=replay_kernels"
SET=(--set "p31:open_rows.OPEN_ROW_SHAPES=((3.0, 122, 168), (8.0, 31, 128))" --set "p41:open_rows.OPEN_ROW_SHAPES=((3.0, 122, 168), (8.0, 41, 128))" --set "s61:open_rows.OPEN_ROW_SHAPES=((8.0, 61, 128),)")
timeout 250 python3 tools/ab_kernels.py --kernels --steps 20 --cases "SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC top-p 0.9 R=64$" \
  $V "${SET[@]}" 2>&1 | grep -v -i warn > $G/ab64.txt
echo "ab64 rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab64.txt | head -20; grep "^\*" $G/ab64.txt | head -20
timeout 150 python3 tools/ab_kernels.py --kernels --steps 8 --cases "SYNTHETIC top-p 0.9 R=8$,SYNTHETIC top-p 0.9 R=16$,SYNTHETIC top-p 0.9 R=32$,SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC plain R=64$" \
  $V "${SET[@]}" 2>&1 | grep -v -i warn > $G/ab_small.txt
echo "ab small rc=$?"; grep -E "^\||DIFFER|Error|differ" $G/ab_small.txt | head -20; grep "^\*" $G/ab_small.txt | head -30
