#!/usr/bin/env bash
# SCRATCH (fourteenth session): the stats and mass passes from one load of the span (rounds as in b30b400),
# A/B over 20 steps against b30b400.
# Before: rm -rf scratch/base && mkdir -p scratch/base && git archive b30b400 replay_kernels | tar -x -C scratch/base
# run(command="timeout 280 bash docs/bench/2026-12-01-h200-s14/scripts/ab_stats_mass.sh", carry=["scratch", ".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/o
timeout 200 python3 tools/ab_kernels.py --steps 20 --cases "verify k=4 top-p,top-k 50" \
  --variant base=scratch/base/replay_kernels --variant tree=replay_kernels 2>&1 | grep -v -i "warn" | tee /tmp/o/ab_stats_mass.txt
echo "ab rc=${PIPESTATUS[0]}"
timeout 50 python3 tools/profile_kernels.py --sequence --launches 10 2>&1 | grep -v -i warn > /tmp/o/sequence_stats_mass.txt
echo "sequence rc=$?"; awk '/k=4 top_p=0.9/{f=1} f' /tmp/o/sequence_stats_mass.txt | grep -E "round|stats|mass|device time" | head -20
tar czf $OUT/stats_mass.tgz -C /tmp/o .
