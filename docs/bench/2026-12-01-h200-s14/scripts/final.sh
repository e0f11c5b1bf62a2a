#!/usr/bin/env bash
# SCRATCH (fourteenth session): final bench and CUDA checks after the fallback's 32-program grid, one call.
# run(command="timeout 580 bash docs/bench/2026-12-01-h200-s14/scripts/final.sh", carry=["scratch", ".peers"])
set -u
R=$OUT; mkdir -p /tmp/f/bench /tmp/f/checks
OUT=/tmp/f/bench timeout 330 bash tools/run_gpu_bench.sh --vocab 248320 --top-p 1.0,0.9 --budget-s 140 > /tmp/f/bench/stdout.txt 2>&1; echo "bench rc=$?"
tail -40 /tmp/f/bench/stdout.txt
OUT=/tmp/f/checks SKIP_KERNEL_TESTS=1 timeout 230 bash tools/run_gpu_checks.sh > /tmp/f/checks/stdout.txt 2>&1; echo "checks rc=$?"
tail -15 /tmp/f/checks/stdout.txt
tar czf $R/final.tgz -C /tmp/f .
