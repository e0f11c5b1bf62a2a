#!/usr/bin/env bash
# Twenty-third session, call 0: where the launch sequence of sample-and-check spends its time at R = 64 / 256
# (torch.profiler device µs per kernel, in launch order), and how many requests its first check leaves open.
# run(command="timeout 590 bash docs/bench/2026-12-03-h200-s23/scripts/call0.sh")
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=$OUT/call0; mkdir -p $G
timeout 150 python3 docs/bench/2026-12-03-h200-s23/scripts/open_rows.py 2>&1 | grep -v -i warn | tee $G/open_rows.txt
timeout 300 python3 tools/profile_kernels.py --sequence --launches 20 2>&1 | grep -v -i warn > $G/profile_sequence.txt
echo "profile rc=$?"; grep -E "^## |^\| [0-9]+ \|" $G/profile_sequence.txt | head -120
