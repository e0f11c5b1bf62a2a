#!/usr/bin/env bash
# Twenty-third session, call 4: correctness on CUDA of the tree as committed (the open-row launch on by default):
# tools/run_gpu_checks.sh (kernel tests, impl tests, replay run / verify / bench of every committed fixture).
# run(command="timeout 560 bash docs/bench/2026-12-03-h200-s23/scripts/call4.sh")
set -u
export OUT=$OUT/call4; mkdir -p $OUT
timeout 540 bash tools/run_gpu_checks.sh > /dev/null 2>&1
echo "checks rc=$?"; grep -E "^==== exit|passed|failed|== done" $OUT/log.txt
