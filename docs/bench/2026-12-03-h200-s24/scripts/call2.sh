#!/usr/bin/env bash
# Twenty-fourth session, call 2: two levels (x_d - 4, x_d - 8) summed as two scalar block sums a tile, instead of
# call 1's four levels as one [4, BLOCK] reduction (position launches 106.9 -> 165.9 µs at R = 64). A/B against
# scratch/s24base over 20 SYNTHETIC steps a case; why the pending tests stay pending (host float64 recompute).
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s24/scripts/call2.sh", carry=["scratch"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call2; mkdir -p $G
timeout 300 python3 tools/ab_kernels.py --kernels --steps 20 \
  --cases "SYNTHETIC verify k=4 top-p 0.9 R=8$,SYNTHETIC verify k=4 top-p 0.9 R=64$,SYNTHETIC verify k=4 R=64$" \
  --variant base=scratch/s24base/replay_kernels --variant tree=replay_kernels \
  2>&1 | grep -v -i warn > $G/ab.txt
echo "ab rc=$?"; grep -E "^\||differ|DIFFER|mismatch|Error" $G/ab.txt | head -30; grep "^\*" $G/ab.txt | grep "top-p 0.9 R=64"
timeout 200 python3 docs/bench/2026-12-03-h200-s24/scripts/pending_why.py > $G/pending_why.txt 2>&1
echo "why rc=$?"; cut -c1-400 $G/pending_why.txt | head -30
