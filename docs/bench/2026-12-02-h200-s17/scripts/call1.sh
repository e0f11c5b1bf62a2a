#!/usr/bin/env bash
# Seventeenth session, first device call: the sixteenth session's prepared first call (GPU tests with the
# finish-loop twin, the CUDA checks), then each standard case's kernels in launch order (where the
# missed targets spend their time).
# run(command="timeout 580 bash docs/bench/2026-12-02-h200-s17/scripts/call1.sh", carry=[".peers"])
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=/tmp/c1; mkdir -p $G
timeout 300 bash docs/bench/2026-12-02-h200-s16/scripts/next_first_call.sh > $G/next_first_call.txt 2>&1
echo "next_first_call rc=$?"; cat $G/next_first_call.txt
timeout 200 python3 tools/profile_kernels.py --sequence > $G/sequence.txt 2>&1; echo "sequence rc=$?"
cat $G/sequence.txt | head -150
tar czf $OUT/c1.tgz -C $G .
